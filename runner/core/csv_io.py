"""Reading, checking and writing CSVs in a pinned schema: header drift named column by
column, LF and CRLF line endings both read (upstream's quick script writes CRLF through
``csv.DictWriter``), a BOM or a lone carriage return refused (docs/protocol.md §4.4),
size and line length bounded, PASS rows held to their values, atomic writes."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.core.csv_schema import (
    _WHAT_NEXT,
    BACKWARD_TIME,
    CHECK,
    CHECK_VALUES,
    DIMENSIONS,
    LABEL,
    SCHEMAS,
    BenchCSV,
    Row,
    Schema,
)
from runner.core.errors import ConfigError, CsvValueError, SchemaDriftError
from runner.core.files import read_bounded, write_atomic
from runner.core.limits import MAX_CSV_BYTES, MAX_CSV_LINE, MAX_CSV_ROWS, MIN_TIME_MS

SHOWN = 200  # characters of a file's text a message may echo
MAX_NOTES = 12  # differences listed before "... and N more"


def shown(text: str, limit: int = SHOWN) -> str:
    """``repr(text)``, cut to about ``limit`` characters: what a message may echo."""
    r = repr(text)
    return r if len(r) <= limit else f"{r[:limit]}... ({len(text)} characters)"


def header_columns(header: str) -> tuple[str, ...]:
    """The columns of a header line, its line ending (LF or CRLF) not part of the last
    one.  Nothing else is trimmed: a BOM or stray whitespace stays in its column."""
    return tuple(header.removesuffix("\n").removesuffix("\r").split(","))


def same_columns(actual: str, pinned: str) -> bool:
    """Whether two header lines name the same columns in the same order."""
    return header_columns(actual) == header_columns(pinned)


def check_header(actual: str, pinned: str, *, source: str | None = None) -> None:
    """Raise SchemaDriftError unless ``actual`` has ``pinned``'s columns, in its order and
    spelled byte for byte (the line ending, LF or CRLF, is not a column)."""
    if same_columns(actual, pinned):
        return
    where = f"{source}: " if source else ""
    found = describe_drift(actual, pinned)
    if len(found) > MAX_NOTES:
        found = [*found[:MAX_NOTES], f"... and {len(found) - MAX_NOTES} more differences"]
    notes = "\n".join(f"  - {n}" for n in found)
    raise SchemaDriftError(
        f"{where}CSV header differs from the pinned schema:\n{notes}\n"
        f"  found:  {shown(actual)}\n  pinned: {shown(pinned)}\n{_WHAT_NEXT}"
    )


def describe_drift(actual: str, pinned: str) -> list[str]:
    """Human-readable differences between two header lines, most specific first."""
    notes: list[str] = []
    actual, pinned = (
        _strip_encoding(actual.removesuffix("\n").removesuffix("\r"), "found", notes),
        _strip_encoding(pinned.removesuffix("\n").removesuffix("\r"), "pinned", notes),
    )
    found = actual.split(",")
    for i, col in enumerate(found, start=1):
        if col != col.strip():
            notes.append(f"column {i} {shown(col, 60)} has leading or trailing whitespace")
    found = [c.strip() for c in found]
    want = pinned.split(",")
    notes += _column_differences(found, want)
    return notes or ["the headers differ byte for byte"]


def _strip_encoding(header: str, which: str, notes: list[str]) -> str:
    """Remove (and note) a UTF-8 BOM and a carriage return inside the header."""
    if header.startswith("\ufeff"):
        notes.append(
            f"the {which} header starts with a UTF-8 byte-order mark (BOM); "
            "save the file as UTF-8 without BOM"
        )
        header = header[1:]
    if "\r" in header:
        notes.append(
            f"the {which} header holds a carriage return that does not end the line; "
            "write LF or CRLF line endings"
        )
        header = header.replace("\r", "")
    return header


def _column_differences(found: list[str], want: list[str]) -> list[str]:
    """Renamed, missing, extra and moved columns (positions are 1-based)."""
    notes: list[str] = []
    missing = [(want.index(c) + 1, c) for c in want if c not in found]
    extra = [(i, c) for i, c in enumerate(found, start=1) if c not in want]
    renamed = {p for p, _ in missing} & {p for p, _ in extra}
    for pos in sorted(renamed):
        notes.append(
            f"column {pos} renamed: pinned {want[pos - 1]!r}, found {shown(found[pos - 1], 60)}"
        )
    for pos, col in missing:
        if pos not in renamed:
            notes.append(f"missing column {col!r} (pinned position {pos})")
    for pos, col in extra:
        if pos not in renamed:
            notes.append(f"extra column {shown(col, 60)} at position {pos}")
    common_found = [c for c in found if c in want]
    common_want = [c for c in want if c in found]
    if common_found != common_want:
        moved = [
            f"{shown(c, 60)} at position {found.index(c) + 1} (pinned {want.index(c) + 1})"
            for c in common_want
            if found.index(c) != want.index(c)
        ]
        notes.append("columns reordered: " + ", ".join(moved))
    return notes


def detect_schema(header: str, *, source: str | None = None) -> Schema:
    """The built-in schema whose header equals ``header``; SchemaDriftError against the
    closest one otherwise."""
    for schema in SCHEMAS.values():
        if same_columns(header, schema.header):
            return schema
    cols = set(_strip_encoding(",".join(header_columns(header)), "found", []).split(","))
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
        if same_columns(pinned, schema.header):
            return schema
    return Schema("pinned", header_columns(pinned))


def read_csv(path: str | os.PathLike[str], pinned: str | Schema | None = None) -> BenchCSV:
    """Read and validate a benchmark CSV.  ``pinned`` (a header line or a Schema) is the
    header frozen at BASELINE; without it the header must equal a built-in schema's.
    LF and CRLF line endings both read; a BOM or a lone carriage return is refused
    (``check_encoding``), as is a file over ``MAX_CSV_BYTES`` or with a line over
    ``MAX_CSV_LINE`` bytes (never read whole)."""
    p = Path(path)
    text = check_encoding(_read_text(p), str(p))
    header, _, body = text.partition("\n")
    schema = _pinned_schema(header, pinned, str(p))
    rows = _parse_rows(body, schema, str(p))
    return BenchCSV(path=p, header=header, schema=schema, rows=rows)


def check_encoding(text: str, source: str) -> str:
    """``text`` with its CRLF line endings read as LF (``csv.DictWriter``, which upstream's
    quick script uses, ends lines with CRLF; checked at Primus-Turbo a6a16cdc).  Raise
    SchemaDriftError (exit 2) when it starts with a UTF-8 byte-order mark or holds a
    carriage return that does not end a line: docs/protocol.md §4.4 stops the round on
    both.  The one check for every CSV the runner reads and for a pinned header file."""
    notes: list[str] = []
    if text.startswith("\ufeff"):
        notes.append("it starts with a UTF-8 byte-order mark (BOM): save it as UTF-8 without BOM")
    lf = text.replace("\r\n", "\n")
    cr = lf.find("\r")
    if cr >= 0:
        line = lf.count("\n", 0, cr) + 1
        notes.append(
            f"line {line} holds a carriage return that does not end the line (a lone CR): "
            "write LF or CRLF line endings"
        )
    if notes:
        listed = "; ".join(notes)
        raise SchemaDriftError(f"{source}: {listed}.\n{_WHAT_NEXT}")
    return lf


def _read_text(path: Path) -> str:
    """The file decoded as UTF-8, bounded in size and line length."""
    raw = read_bounded(path, "benchmark CSV", max_bytes=MAX_CSV_BYTES, max_line=MAX_CSV_LINE)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 (byte {exc.start}); re-save the CSV as UTF-8"
        ) from None


def _parse_rows(body: str, schema: Schema, source: str) -> tuple[Row, ...]:
    """Split, check and wrap the data lines; duplicate or empty labels are errors."""
    rows: list[Row] = []
    seen: set[str] = set()
    try:
        records = list(csv.reader(io.StringIO(body, newline=""), strict=True))
    except csv.Error as exc:
        raise CsvValueError(f"{source}: malformed CSV ({exc}); fix the quoting") from None
    if len(records) > MAX_CSV_ROWS:
        raise CsvValueError(
            f"{source}: {len(records):,} rows, over the {MAX_CSV_ROWS:,} shapes a benchmark "
            "CSV may hold; this is not one benchmark's CSV: check the path (or what wrote it)"
        )
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
    if column.endswith("(ms)"):
        return "time"
    if column in DIMENSIONS or "TFLOPS" in column or "GB/s" in column:
        return "positive"
    return "non-negative"


def _problem(value: float | None, rule: str) -> str | None:
    if value is None:
        return "missing"
    if math.isnan(value):
        return "NaN"
    if value < 0:
        return "negative"
    if rule in ("positive", "time") and value == 0:
        return "zero"
    if math.isinf(value) and rule != "snr":
        return "infinite"
    if rule == "time" and value < MIN_TIME_MS:
        return f"under {MIN_TIME_MS:g} ms, a nanosecond: no kernel call is that fast"
    return None


def check_same_shapes(best: BenchCSV, cand: BenchCSV) -> None:
    """CsvValueError when a label of both CSVs has other dimensions in the candidate (a
    candidate row whose M was 1e30 was ACCEPTED at +1.1e9%): the two measured different
    shapes, and no gain between them means anything."""
    dims = [c for c in best.schema.columns if c in DIMENSIONS]
    theirs = {r.label: r for r in best.rows}
    for row in cand.rows:
        ref = theirs.get(row.label)
        if ref is None:
            continue
        for column in dims:
            if row.number(column) != ref.number(column):
                raise CsvValueError(
                    f"row {shown(row.label)}: {column} = {shown(row.values[column])} in the "
                    f"candidate CSV, {shown(ref.values[column])} in the best one: the two "
                    "measured different shapes; re-run the candidate's benchmark on the "
                    "pinned shapes"
                )


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
