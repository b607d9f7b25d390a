"""CSV rows of the pinned schemas (runner/core/csv_schema.py), built by the worker from one
shape's timings and correctness figures.  Worker-side safe: no torch, no pydantic.

* gemm (GEMM and grouped GEMM): ``B`` the batch or group count, ``M`` the rows per
  batch/group; for a grouped GEMM ``M = sum(group sizes) / B`` (the routing generator
  keeps the sum a multiple of B), the convention of Primus-Turbo's grouped benchmark,
  so that ``2*B*M*N*K`` is exactly the forward FLOPs of the real, skewed group sizes
  and the Combined Step formula ``6*B*M*N*K`` stays right.  TFLOPS use
  ``shape.flops_fwd`` (real group sizes), backward FLOPs = 2x forward.
* memory (quantisation): ``B`` 1, ``M`` x ``N`` the tensor, ``Forward GB/s`` from the
  case's bytes moved; ``max_abs_err`` the op's correctness figure.
* attention: ``B, H, S, D, causal``; TFLOPS from ``shape.flops_fwd`` (4*B*H*S*S*D,
  halved when causal), backward FLOPs = 2.5x forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from runner.core.shapes import ATTENTION_BWD_RATIO, Shape
from runner.core.stats import stdev
from runner.worker.bench.timing_result import Timing

NAN = float("nan")


def rate_stats(work: float, timing: Timing, unit: float) -> tuple[float, float]:
    """``work / time / unit`` of the median time and the stddev over the batches."""
    values = [work / (ms * 1e-3) / unit for ms in timing.samples_ms]
    return work / (timing.median_ms * 1e-3) / unit, stdev(values)


def shape_columns(shape: Shape, schema_name: str) -> dict[str, object]:
    """The columns that describe the shape under ``schema_name``."""
    if schema_name == "attention":
        causal = int(bool(shape.params.get("causal")))
        heads = int(shape.params["heads"])
        return {
            "label": shape.label,
            "B": shape.b,
            "H": heads,
            "S": shape.m,
            "D": shape.k,
            "causal": causal,
        }
    if schema_name == "memory":
        return {"label": shape.label, "B": shape.b, "M": shape.m, "N": shape.n}
    m = shape.m // shape.b if shape.group_sizes is not None else shape.m
    return {"label": shape.label, "B": shape.b, "M": m, "N": shape.n, "K": shape.k}


def _throughput(
    prefix: str, unit_name: str, work: float, timing: Timing | None, unit: float
) -> dict[str, object]:
    cols: dict[str, object] = {
        f"{prefix} {unit_name}": None,
        f"{prefix} {unit_name}_stddev": None,
        f"{prefix} Time (ms)": None,
    }
    if timing is not None:
        value, std = rate_stats(work, timing, unit)
        cols.update(
            {
                f"{prefix} {unit_name}": value,
                f"{prefix} {unit_name}_stddev": std,
                f"{prefix} Time (ms)": timing.median_ms,
            }
        )
    return cols


RowBuilder = Callable[
    [Shape, Timing, "Timing | None", dict[str, float], dict[str, float], bool], dict[str, object]
]


def _figures(keys: tuple[str, ...], figures: dict[str, float]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key in keys:
        value = figures.get(key)
        out[key] = round(value, 3) if value is not None and math.isfinite(value) else value
    return out


def _compute_row(schema: str, bwd_flops: float, keys: tuple[str, ...]) -> RowBuilder:
    """The row builder of a compute-bound schema: TFLOPS forward and backward (the
    backward ``bwd_flops`` times the forward's FLOPs), then the accuracy figures
    ``keys``."""

    def row(
        shape: Shape,
        fwd: Timing,
        bwd: Timing | None,
        moved: dict[str, float],
        figures: dict[str, float],
        ok: bool,
    ) -> dict[str, object]:
        flops = shape.flops_fwd
        out = shape_columns(shape, schema)
        out["Check"] = "PASS" if ok else "FAIL"
        out.update(_throughput("Forward", "TFLOPS", flops, fwd, 1e12))
        out.update(_throughput("Backward", "TFLOPS", bwd_flops * flops, bwd, 1e12))
        out.update(_figures(keys, figures))
        return out

    row.__name__ = f"{schema}_row"
    return row


def memory_row(
    shape: Shape,
    fwd: Timing,
    bwd: Timing | None,
    moved: dict[str, float],
    figures: dict[str, float],
    ok: bool,
) -> dict[str, object]:
    row = shape_columns(shape, "memory")
    row["Check"] = "PASS" if ok else "FAIL"
    row.update(_throughput("Forward", "GB/s", moved["fwd_bytes"], fwd, 1e9))
    row.update(_throughput("Backward", "GB/s", moved["bwd_bytes"], bwd, 1e9))
    err = figures.get("max_abs_err")
    row["max_abs_err"] = err if err is None or not math.isfinite(err) else float(f"{err:.6g}")
    return row


gemm_row = _compute_row("gemm", 2.0, ("out_snr", "da_snr", "db_snr"))
attention_row = _compute_row(
    "attention", ATTENTION_BWD_RATIO, ("out_snr", "dq_snr", "dk_snr", "dv_snr")
)
ROW_BUILDERS: dict[str, RowBuilder] = {
    "gemm": gemm_row,
    "memory": memory_row,
    "attention": attention_row,
}


def failed_row(shape: Shape, schema_name: str, columns: tuple[str, ...]) -> dict[str, object]:
    """A shape that raised: its shape columns, ``Check=FAIL``, every number ``nan``."""
    row: dict[str, object] = {c: NAN for c in columns}
    row.update(shape_columns(shape, schema_name))
    row["Check"] = "FAIL"
    return row
