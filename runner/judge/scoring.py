"""Scoring a pinned CSV (docs/protocol.md §4): one primary metric per shape and
their geometric mean.

* forward-only compute-bound op: ``Forward TFLOPS``;
* forward+backward GEMM-class op: Combined Step TFLOPS, computed from the two *times*
  (``6*B*M*N*K / (fwd_ms + bwd_ms)``), which equals ``6 / (2/F + 4/B)``; a shape
  without a backward pass scores its forward TFLOPS;
* attention (the attention schema: B, H, S, D, causal): the same from the times with
  the step's FLOPs ``3.5 * 4*B*H*S*S*D`` (forward 4*B*H*S^2*D, backward 2.5x forward,
  both halved when causal);
* memory-bound op: ``Forward GB/s``;
* independent metrics (docs/protocol.md §5.9): ``primary_metric`` names several,
  comma-separated as upstream writes them (``"Forward TFLOPS, Backward TFLOPS"``); each
  is scored on its own (``component_metrics``) and ``runner.judge.independent`` judges
  them together; scoring with the whole name scores its first metric, the one the
  records show.

Any FAIL row sets the aggregate to 0 (the candidate is rejected).
"""

from __future__ import annotations

import math
from enum import Enum

from runner.core.csv_schema import (
    BACKWARD_TFLOPS,
    BACKWARD_TIME,
    COMBINED_STEP,
    FORWARD_GBPS,
    FORWARD_TFLOPS,
    FORWARD_TIME,
    BenchCSV,
    Row,
)
from runner.core.errors import ConfigError
from runner.core.outcomes import Score, ShapeScore
from runner.core.shapes import ATTENTION_BWD_RATIO, attention_fwd_flops
from runner.core.stats import geomean

INDEPENDENT = "Forward TFLOPS, Backward TFLOPS"  # upstream's comma-separated form


class Metric(str, Enum):
    """The primary metric a user may ask for; AUTO picks it from the CSV."""

    AUTO = "auto"
    FORWARD = "forward"
    COMBINED = "combined"
    GBPS = "gbps"
    BACKWARD = "backward"
    # forward and backward TFLOPS judged together: docs/protocol.md §5.9
    INDEPENDENT = "independent"


_COLUMN_TO_METRIC = {
    FORWARD_TFLOPS: Metric.FORWARD,
    COMBINED_STEP: Metric.COMBINED,
    FORWARD_GBPS: Metric.GBPS,
    BACKWARD_TFLOPS: Metric.BACKWARD,
}


def component_metrics(primary_metric: str) -> tuple[str, ...]:
    """The metrics a ``primary_metric`` names: several for independent metrics
    (``"Forward TFLOPS, Backward TFLOPS"``, docs/protocol.md §5.9), one otherwise."""
    return tuple(p.strip() for p in primary_metric.split(",") if p.strip())


def combined_step_tflops(
    m: float, n: float, k: float, fwd_ms: float, bwd_ms: float, b: float = 1
) -> float:
    """Training-step TFLOPS: forward (2BMNK) plus backward (4BMNK) FLOPs over the sum
    of both times."""
    return 6.0 * b * m * n * k / ((fwd_ms + bwd_ms) * 1e-3) / 1e12


def _as_metric(metric: Metric | str) -> Metric:
    """A Metric from its value or from a primary-metric column name."""
    if isinstance(metric, Metric):
        return metric
    metric = (component_metrics(metric) or (metric,))[0]  # independent: the first
    if metric in _COLUMN_TO_METRIC:
        return _COLUMN_TO_METRIC[metric]
    try:
        return Metric(metric)
    except ValueError:
        choices = ", ".join(m.value for m in Metric)
        raise ConfigError(f"unknown metric {metric!r}; choose one of {choices}") from None


def has_backward(row: Row) -> bool:
    """True when a PASS row carries a backward time (the op has a backward pass)."""
    if not row.passed or BACKWARD_TIME not in row.values:
        return False
    value = row.number(BACKWARD_TIME)
    return value is not None and not math.isnan(value)


def resolve_metric(csv: BenchCSV, metric: Metric | str = Metric.AUTO) -> str:
    """The primary metric's column name for this CSV; ConfigError when the requested
    metric does not fit the CSV's kind (e.g. GB/s on a GEMM CSV)."""
    chosen = _as_metric(metric)
    if chosen is Metric.INDEPENDENT:  # scored on its first metric, as the records show
        chosen = Metric.FORWARD
    kind = csv.schema.kind
    if kind == "memory":
        if chosen in (Metric.AUTO, Metric.GBPS):
            return FORWARD_GBPS
        raise ConfigError(
            f"metric {chosen.value!r} does not apply to the memory-bound CSV "
            f"{csv.path or ''}; use --metric gbps or auto"
        )
    if chosen is Metric.GBPS:
        raise ConfigError(
            f"metric 'gbps' does not apply to the GEMM-class CSV {csv.path or ''}; "
            "use --metric forward, combined or auto"
        )
    if chosen is Metric.FORWARD:
        return FORWARD_TFLOPS
    if chosen is Metric.BACKWARD:
        return BACKWARD_TFLOPS
    if chosen is Metric.COMBINED or any(has_backward(r) for r in csv.rows):
        return COMBINED_STEP
    return FORWARD_TFLOPS


def shape_value(row: Row, metric_column: str) -> float | None:
    """The primary metric of one row; None for a FAIL row."""
    if not row.passed:
        return None
    if metric_column == COMBINED_STEP:
        return _combined(row)
    if metric_column == BACKWARD_TFLOPS and not has_backward(row):
        raise ConfigError(
            f"row {row.label!r} has no backward pass: Backward TFLOPS cannot be scored; "
            "use a primary_metric without it (docs/protocol.md §5.9)"
        )
    if metric_column not in row.values:
        raise ConfigError(
            f"row {row.label!r} has no column {metric_column!r}; pick a metric the CSV carries"
        )
    return row.number(metric_column)


def _combined(row: Row) -> float | None:
    """Combined Step TFLOPS from the times; forward TFLOPS when there is no backward."""
    if not has_backward(row):
        return row.number(FORWARD_TFLOPS)
    fwd, bwd = _required(row, FORWARD_TIME), _required(row, BACKWARD_TIME)
    if "S" in row.values and "H" in row.values:  # the attention schema
        b, h, s, d = (_required(row, c) for c in ("B", "H", "S", "D"))
        causal = bool(_required(row, "causal")) if "causal" in row.values else False
        step = (1.0 + ATTENTION_BWD_RATIO) * attention_fwd_flops(b, h, s, s, d, causal)
        return step / ((fwd + bwd) * 1e-3) / 1e12
    b, m, n, k = (_required(row, c) if c in row.values else 1.0 for c in ("B", "M", "N", "K"))
    return combined_step_tflops(m, n, k, fwd, bwd, b)


def _required(row: Row, column: str) -> float:
    value = row.number(column)
    if value is None:
        raise ConfigError(
            f"row {row.label!r}: Combined Step TFLOPS needs {column!r}; fill it in or "
            "score with --metric forward"
        )
    return value


def _finite(row: Row, column: str) -> float | None:
    """A diagnostic number, None when absent, not finite or the column is missing."""
    if column not in row.values:
        return None
    value = row.number(column)
    return value if value is not None and math.isfinite(value) else None


def score_row(row: Row, metric_column: str, csv: BenchCSV) -> ShapeScore:
    """One row scored, with forward/backward throughput and times as diagnostics."""
    return ShapeScore(
        label=row.label,
        check=row.check,
        value=shape_value(row, metric_column),
        forward=_finite(row, csv.schema.forward_metric),
        backward=_finite(row, csv.schema.backward_metric),
        forward_ms=_finite(row, FORWARD_TIME),
        backward_ms=_finite(row, BACKWARD_TIME),
        snr=_worst_snr(row),
    )


def _worst_snr(row: Row) -> float | None:
    """The smallest finite ``*_snr`` of a row (the output furthest from its reference)."""
    found = [_finite(row, c) for c in row.values if c.endswith("_snr")]
    kept = [v for v in found if v is not None]
    return min(kept) if kept else None


def score(csv: BenchCSV, metric: Metric | str = Metric.AUTO) -> Score:
    """Score a CSV: per-shape primary metric and the geomean over PASS shapes (0.0 when
    any row FAILs).  ``metric`` is a Metric, its value, or a column name."""
    column = resolve_metric(csv, metric)
    shapes = tuple(score_row(r, column, csv) for r in csv.rows)
    n_fail = sum(1 for s in shapes if s.check != "PASS")
    values = [s.value for s in shapes if s.value is not None]
    aggregate = 0.0 if n_fail else geomean(values)
    return Score(
        metric=column,
        aggregate=aggregate,
        shapes=shapes,
        n_pass=len(shapes) - n_fail,
        n_fail=n_fail,
    )
