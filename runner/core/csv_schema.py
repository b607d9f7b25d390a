"""The pinned benchmark CSV (docs/protocol.md §4): its headers, a strict reader and an
atomic writer.

The header is frozen at BASELINE and its columns are compared exactly in every round.
Upstream, a drifted header silently switched the per-shape regression gate off; here any
difference in the columns (a renamed, moved, extra or missing column, stray whitespace)
raises ``SchemaDriftError`` naming what differs.  The file's encoding is not part of the
schema: LF and CRLF line endings (even mixed) read the same, and a UTF-8 byte-order mark
is tolerated and noted (``BenchCSV.notes``).  Row values are validated too: a PASS
row must carry usable numbers, because the gate divides and takes logarithms of them.

Value conventions (shared by reader and writer):

* ``-`` or an empty cell: not applicable (no backward pass, an SNR that does not apply).
* ``nan``: the measurement failed; only allowed in FAIL/ERROR rows (and, in a PASS row,
  for the backward columns of an op without a backward pass).
* Floats are written with ``repr`` (shortest string that round-trips exactly), so a
  value read back is bit-identical to the one written and the gate's verdict cannot
  depend on a formatting step.
"""

from __future__ import annotations

import csv
import io
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import ConfigError, CsvValueError, SchemaDriftError
from runner.core.files import write_atomic

log = logging.getLogger("runner.core.csv_schema")

GEMM_COLUMNS: tuple[str, ...] = (
    "label",
    "B",
    "M",
    "N",
    "K",
    "Check",
    "Forward TFLOPS",
    "Forward TFLOPS_stddev",
    "Backward TFLOPS",
    "Backward TFLOPS_stddev",
    "Forward Time (ms)",
    "Backward Time (ms)",
    "out_snr",
    "da_snr",
    "db_snr",
)

MEMORY_COLUMNS: tuple[str, ...] = (
    "label",
    "B",
    "M",
    "N",
    "Check",
    "Forward GB/s",
    "Forward GB/s_stddev",
    "Backward GB/s",
    "Backward GB/s_stddev",
    "Forward Time (ms)",
    "Backward Time (ms)",
    "max_abs_err",
)

# Attention (flash-attention forward + backward): the GEMM-class metrics with the
# attention dimensions (B batch, H query heads, S sequence length, D head dim, causal
# 0/1) and one SNR per output (out, dq, dk, dv).  Scoring derives the step's FLOPs from
# the dimensions (runner/judge/scoring.py).
ATTENTION_COLUMNS: tuple[str, ...] = (
    "label",
    "B",
    "H",
    "S",
    "D",
    "causal",
    "Check",
    "Forward TFLOPS",
    "Forward TFLOPS_stddev",
    "Backward TFLOPS",
    "Backward TFLOPS_stddev",
    "Forward Time (ms)",
    "Backward Time (ms)",
    "out_snr",
    "dq_snr",
    "dk_snr",
    "dv_snr",
)

LABEL = "label"
CHECK = "Check"
BACKWARD_TIME = "Backward Time (ms)"
DIMENSIONS = frozenset({"B", "M", "N", "K", "H", "S", "D"})
# columns that describe the shape, not a measurement: kept in a merged FAIL row
SHAPE_COLUMNS = frozenset({LABEL, "causal", *DIMENSIONS})
ABSENT = frozenset({"-", ""})
CHECK_VALUES = ("PASS", "FAIL", "ERROR")

_WHAT_NEXT = (
    "The header is frozen at BASELINE (docs/protocol.md §4.4): restore it byte for byte "
    "in the benchmark script, or start a new campaign if the change is deliberate."
)


@dataclass(frozen=True)
class Schema:
    """A named, ordered list of CSV columns; ``header`` is the exact first line."""

    name: str
    columns: tuple[str, ...]

    def __post_init__(self) -> None:
        missing = [c for c in (LABEL, CHECK) if c not in self.columns]
        if missing or not ("Forward TFLOPS" in self.columns or "Forward GB/s" in self.columns):
            raise ConfigError(
                f"schema {self.name!r} needs the columns 'label', 'Check' and one of "
                f"'Forward TFLOPS' / 'Forward GB/s'; it has {list(self.columns)}. "
                "Pin a header that follows docs/protocol.md §4."
            )

    @property
    def header(self) -> str:
        return ",".join(self.columns)

    @property
    def kind(self) -> str:
        """``"memory"`` for GB/s schemas, ``"gemm"`` for TFLOPS schemas."""
        return "memory" if "Forward GB/s" in self.columns else "gemm"

    @property
    def forward_metric(self) -> str:
        return "Forward GB/s" if self.kind == "memory" else "Forward TFLOPS"

    @property
    def backward_metric(self) -> str:
        return "Backward GB/s" if self.kind == "memory" else "Backward TFLOPS"


GEMM_SCHEMA = Schema("gemm", GEMM_COLUMNS)
MEMORY_SCHEMA = Schema("memory", MEMORY_COLUMNS)
ATTENTION_SCHEMA = Schema("attention", ATTENTION_COLUMNS)
SCHEMAS: dict[str, Schema] = {s.name: s for s in (GEMM_SCHEMA, MEMORY_SCHEMA, ATTENTION_SCHEMA)}


def get_schema(name: str) -> Schema:
    """The built-in schema called ``name``; ConfigError lists the valid names."""
    try:
        return SCHEMAS[name]
    except KeyError:
        raise ConfigError(
            f"unknown CSV schema {name!r}; choose one of {', '.join(sorted(SCHEMAS))}"
        ) from None


# ---------------------------------------------------------------- values


def parse_number(text: str) -> float | None:
    """``-``/empty -> None, ``nan`` -> NaN, otherwise a float; ValueError when the text
    is not a plain number (Python's ``1_000`` spelling is refused)."""
    if text in ABSENT:
        return None
    if "_" in text:
        raise ValueError(text)
    return float(text)


@dataclass(frozen=True)
class Row:
    """One data row, the raw cell text keyed by column name."""

    values: dict[str, str]

    @property
    def label(self) -> str:
        return self.values[LABEL]

    @property
    def check(self) -> str:
        """``PASS`` or ``FAIL`` (the full benchmark's ``ERROR`` counts as FAIL)."""
        return "PASS" if self.values.get(CHECK) == "PASS" else "FAIL"

    @property
    def passed(self) -> bool:
        return self.check == "PASS"

    def number(self, column: str) -> float | None:
        """The cell as a float: None when absent (``-`` or empty), NaN for ``nan``."""
        text = self.values[column]
        try:
            return parse_number(text)
        except ValueError:
            raise CsvValueError(
                f"row {self.label!r}, column {column!r}: {text!r} is not a number; "
                "write a plain decimal number, '-' when not applicable, or 'nan' in a "
                "FAIL row"
            ) from None


@dataclass(frozen=True)
class BenchCSV:
    """A read and validated pinned CSV."""

    path: Path | None
    header: str
    schema: Schema
    rows: tuple[Row, ...]
    notes: tuple[str, ...] = ()  # what the reader tolerated (a BOM)

    def labels(self) -> list[str]:
        return [r.label for r in self.rows]


# ---------------------------------------------------------------- header drift


def check_header(actual: str, pinned: str, *, source: str | None = None) -> None:
    """Raise SchemaDriftError unless ``actual`` equals ``pinned`` byte for byte."""
    if actual == pinned:
        return
    where = f"{source}: " if source else ""
    notes = "\n".join(f"  - {n}" for n in describe_drift(actual, pinned))
    raise SchemaDriftError(
        f"{where}CSV header differs from the pinned schema:\n{notes}\n"
        f"  found:  {actual!r}\n  pinned: {pinned!r}\n{_WHAT_NEXT}"
    )


def describe_drift(actual: str, pinned: str) -> list[str]:
    """Human-readable differences between two header lines, most specific first."""
    notes: list[str] = []
    actual, pinned = (
        _strip_encoding(actual, "found", notes),
        _strip_encoding(pinned, "pinned", notes),
    )
    found = actual.split(",")
    for i, col in enumerate(found, start=1):
        if col != col.strip():
            notes.append(f"column {i} {col!r} has leading or trailing whitespace")
    found = [c.strip() for c in found]
    want = pinned.split(",")
    notes += _column_differences(found, want)
    return notes or ["the headers differ byte for byte"]


def _strip_encoding(header: str, which: str, notes: list[str]) -> str:
    """Remove (and note) a UTF-8 BOM and a trailing carriage return."""
    if header.startswith("\ufeff"):
        notes.append(
            f"the {which} header starts with a UTF-8 byte-order mark (BOM); "
            "save the file as UTF-8 without BOM"
        )
        header = header[1:]
    if header.endswith("\r"):
        notes.append(
            f"the {which} header ends with a carriage return (CRLF line "
            "endings); write LF line endings"
        )
        header = header[:-1]
    return header


def _column_differences(found: list[str], want: list[str]) -> list[str]:
    """Renamed, missing, extra and moved columns (positions are 1-based)."""
    notes: list[str] = []
    missing = [(want.index(c) + 1, c) for c in want if c not in found]
    extra = [(i, c) for i, c in enumerate(found, start=1) if c not in want]
    renamed = {p for p, _ in missing} & {p for p, _ in extra}
    for pos in sorted(renamed):
        notes.append(f"column {pos} renamed: pinned {want[pos - 1]!r}, found {found[pos - 1]!r}")
    for pos, col in missing:
        if pos not in renamed:
            notes.append(f"missing column {col!r} (pinned position {pos})")
    for pos, col in extra:
        if pos not in renamed:
            notes.append(f"extra column {col!r} at position {pos}")
    common_found = [c for c in found if c in want]
    common_want = [c for c in want if c in found]
    if common_found != common_want:
        moved = [
            f"{c!r} at position {found.index(c) + 1} (pinned {want.index(c) + 1})"
            for c in common_want
            if found.index(c) != want.index(c)
        ]
        notes.append("columns reordered: " + ", ".join(moved))
    return notes


def detect_schema(header: str, *, source: str | None = None) -> Schema:
    """The built-in schema whose header equals ``header``; SchemaDriftError against the
    closest one otherwise."""
    for schema in SCHEMAS.values():
        if schema.header == header:
            return schema
    cols = set(_strip_encoding(header, "found", []).split(","))
    closest = max(SCHEMAS.values(), key=lambda s: len(cols & set(s.columns)))
    check_header(header, closest.header, source=source)
    raise AssertionError("unreachable")  # pragma: no cover


def _pinned_schema(header: str, pinned: str | Schema | None, source: str) -> Schema:
    """The schema the file must follow: detected, or the pinned one (checked)."""
    if pinned is None:
        return detect_schema(header, source=source)
    if isinstance(pinned, Schema):
        check_header(header, pinned.header, source=source)
        return pinned
    check_header(header, pinned, source=source)
    for schema in SCHEMAS.values():
        if schema.header == pinned:
            return schema
    return Schema("pinned", tuple(pinned.split(",")))


# ---------------------------------------------------------------- reading


def read_csv(path: str | os.PathLike[str], pinned: str | Schema | None = None) -> BenchCSV:
    """Read and validate a benchmark CSV.  ``pinned`` (a header line or a Schema) is the
    header frozen at BASELINE; without it the header must equal a built-in schema's."""
    p = Path(path)
    text = _read_text(p)
    notes: list[str] = []
    if text.startswith("\ufeff"):
        notes.append(f"{p}: a UTF-8 byte-order mark (BOM) at the start was ignored")
        log.warning("%s", notes[-1])
        text = text[1:]
    header, _, body = text.partition("\n")
    header = header.removesuffix("\r")  # CRLF: the line ending is not part of the schema
    schema = _pinned_schema(header, pinned, str(p))
    rows = _parse_rows(body, schema, str(p))
    return BenchCSV(path=p, header=header, schema=schema, rows=rows, notes=tuple(notes))


def _read_text(path: Path) -> str:
    """The file decoded as UTF-8 (a BOM is kept: ``read_csv`` notes and drops it)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the CSV ({exc.strerror or exc}); check the path"
        ) from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc}); re-save the CSV as UTF-8") from None


def _parse_rows(body: str, schema: Schema, source: str) -> tuple[Row, ...]:
    """Split, check and wrap the data lines; duplicate or empty labels are errors."""
    rows: list[Row] = []
    seen: set[str] = set()
    try:
        records = list(csv.reader(io.StringIO(body, newline=""), strict=True))
    except csv.Error as exc:
        raise CsvValueError(f"{source}: malformed CSV ({exc}); fix the quoting") from None
    for lineno, cells in enumerate(records, start=2):
        if not cells:
            continue
        row = _make_row(cells, schema, f"{source}:{lineno}")
        if row.label in seen:
            raise CsvValueError(
                f"{source}:{lineno}: duplicate label {row.label!r}; every shape must "
                "appear once — give each row a unique label"
            )
        seen.add(row.label)
        validate_row(row, schema, source=source)
        rows.append(row)
    if not rows:
        raise CsvValueError(f"{source}: no data rows; re-run the benchmark")
    return tuple(rows)


def _make_row(cells: list[str], schema: Schema, where: str) -> Row:
    if len(cells) != len(schema.columns):
        raise CsvValueError(
            f"{where}: {len(cells)} cells, the header has {len(schema.columns)}; "
            "every row must have one cell per column (use '-' for not applicable)"
        )
    row = Row(dict(zip(schema.columns, cells, strict=True)))
    if not row.label:
        raise CsvValueError(f"{where}: empty label; every row needs a unique label")
    return row


# ---------------------------------------------------------------- row validation


def validate_row(row: Row, schema: Schema, *, source: str | None = None) -> None:
    """Raise CsvValueError when a row breaks the schema's value rules (module doc)."""
    where = f"{source}: " if source else ""
    raw_check = row.values[CHECK]
    if raw_check not in CHECK_VALUES:
        raise CsvValueError(
            f"{where}row {row.label!r}, column 'Check': {raw_check!r} is not one of "
            f"{', '.join(CHECK_VALUES)}; fix the benchmark's correctness column"
        )
    numbers = {c: row.number(c) for c in schema.columns if c not in (LABEL, CHECK)}
    if not row.passed:
        return
    skip = _absent_backward(row, schema, numbers, where)
    for column, value in numbers.items():
        if column not in skip:
            _check_pass_value(row, column, value, where)


def _absent_backward(
    row: Row, schema: Schema, numbers: Mapping[str, float | None], where: str
) -> set[str]:
    """The backward columns to skip: all of them when the op has no backward pass.
    Throughput and time must be absent together."""
    pair = [c for c in (schema.backward_metric, BACKWARD_TIME) if c in numbers]
    absent = [c for c in pair if _is_absent(numbers[c])]
    if not absent:
        return set()
    if len(absent) != len(pair):
        present = next(c for c in pair if c not in absent)
        raise CsvValueError(
            f"{where}row {row.label!r}: {present!r} is present but {absent[0]!r} is "
            f"{row.values[absent[0]]!r}; write both backward columns or neither ('-')"
        )
    return {c for c in numbers if c.startswith("Backward ")}


def _is_absent(value: float | None) -> bool:
    return value is None or math.isnan(value)


def _check_pass_value(row: Row, column: str, value: float | None, where: str) -> None:
    """Throughput, time and dimensions must be finite and > 0; stddev and correctness
    figures finite and >= 0; an SNR may be ``-`` and may be ``inf`` (exact result)."""
    rule = _rule(column)
    if value is None and rule == "snr":
        return
    problem = _problem(value, rule)
    if problem:
        raise CsvValueError(
            f"{where}row {row.label!r} is PASS but column {column!r} is "
            f"{row.values[column]!r} ({problem}); a PASS row needs a usable measurement "
            "— fix the benchmark, or mark the row FAIL"
        )


def _rule(column: str) -> str:
    if column.endswith("_snr"):
        return "snr"
    if column.endswith("_stddev"):
        return "non-negative"
    if column in DIMENSIONS or column.endswith("(ms)") or "TFLOPS" in column or "GB/s" in column:
        return "positive"
    return "non-negative"


def _problem(value: float | None, rule: str) -> str | None:
    if value is None:
        return "missing"
    if math.isnan(value):
        return "NaN"
    if value < 0:
        return "negative"
    if rule == "positive" and value == 0:
        return "zero"
    if math.isinf(value) and rule != "snr":
        return "infinite"
    return None


# ---------------------------------------------------------------- writing


def format_value(value: object) -> str:
    """Cell text: None -> ``-``, floats via ``repr`` (exact round trip), NaN -> ``nan``."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        raise TypeError(f"a boolean is not a CSV value: {value!r}")
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return repr(value)
    return str(value)


def write_csv(
    path: str | os.PathLike[str], schema: Schema, rows: Sequence[Mapping[str, object]]
) -> None:
    """Write rows under ``schema``'s exact header, atomically (temp file + os.replace),
    so that a reader never sees a half-written CSV.  Every row must have exactly the
    schema's columns.  Values are not validated here: ``read_csv`` is the gate."""
    p = Path(path)
    buf = io.StringIO()
    buf.write(schema.header + "\n")
    writer = csv.writer(buf, lineterminator="\n")
    for row in rows:
        _check_keys(row, schema)
        writer.writerow([format_value(row[c]) for c in schema.columns])
    write_atomic(p, buf.getvalue())


def _check_keys(row: Mapping[str, object], schema: Schema) -> None:
    missing = [c for c in schema.columns if c not in row]
    extra = [c for c in row if c not in schema.columns]
    if missing or extra:
        raise CsvValueError(
            f"row {row.get(LABEL)!r} does not match schema {schema.name!r}: "
            f"missing {missing}, extra {extra}; pass exactly the schema's columns"
        )
