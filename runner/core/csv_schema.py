"""The pinned benchmark CSV (docs/protocol.md §4): its headers, a strict reader and an
atomic writer.

The header is frozen at BASELINE and its columns are compared exactly in every round.
Upstream, a drifted header silently switched the per-shape regression gate off; here any
difference in the columns (a renamed, moved, extra or missing column, stray whitespace)
raises ``SchemaDriftError`` naming what differs.  A UTF-8 byte-order mark or a carriage
return (CRLF line endings) stop the round the same way (docs/protocol.md §4.4), in every
CSV the runner reads.  Row values are validated too: a PASS row must carry usable
numbers, because the gate divides and takes logarithms of them.

Value conventions (shared by reader and writer):

* ``-`` or an empty cell: not applicable (no backward pass, an SNR that does not apply).
* ``nan``: the measurement failed; only allowed in FAIL/ERROR rows (and, in a PASS row,
  for the backward columns of an op without a backward pass).
* Floats are written with ``repr`` (shortest string that round-trips exactly), so a
  value read back is bit-identical to the one written and the gate's verdict cannot
  depend on a formatting step.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import ConfigError, CsvValueError

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
FORWARD_TIME = "Forward Time (ms)"
# the primary metrics: two columns, and the training step scoring derives from the times
FORWARD_TFLOPS = "Forward TFLOPS"
BACKWARD_TFLOPS = "Backward TFLOPS"
FORWARD_GBPS = "Forward GB/s"
COMBINED_STEP = "Combined Step TFLOPS"
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

    def labels(self) -> list[str]:
        return [r.label for r in self.rows]


# ---------------------------------------------------------------- header drift


# ---------------------------------------------------------------- reading


# ---------------------------------------------------------------- row validation


# ---------------------------------------------------------------- writing
