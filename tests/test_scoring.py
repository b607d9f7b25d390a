"""Scoring: the combined-step formula, metric resolution and the aggregate."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.csv_io import read_csv, write_csv
from runner.core.csv_schema import GEMM_SCHEMA, MEMORY_SCHEMA, BenchCSV
from runner.core.errors import ConfigError
from runner.judge.scoring import (
    COMBINED_STEP,
    FORWARD_GBPS,
    FORWARD_TFLOPS,
    Metric,
    combined_step_tflops,
    resolve_metric,
    score,
    shape_value,
)

DIM = 4096


def fwd_ms(tflops: float, m: int = DIM, n: int = DIM, k: int = DIM, b: int = 1) -> float:
    return 2 * b * m * n * k / (tflops * 1e12) * 1e3


def gemm(
    label: str, fwd: float, bwd: float | None, check: str = "PASS", b: int = 1
) -> dict[str, object]:
    """A self-consistent GEMM row: times derived from the throughputs."""
    return {
        "label": label,
        "B": b,
        "M": DIM,
        "N": DIM,
        "K": DIM,
        "Check": check,
        "Forward TFLOPS": fwd,
        "Forward TFLOPS_stddev": 0.5,
        "Backward TFLOPS": bwd,
        "Backward TFLOPS_stddev": 0.5 if bwd else None,
        "Forward Time (ms)": fwd_ms(fwd, b=b),
        "Backward Time (ms)": 2 * fwd_ms(bwd, b=b) if bwd else None,
        "out_snr": 40.0,
        "da_snr": 40.0 if bwd else None,
        "db_snr": 40.0 if bwd else None,
    }


def failed(label: str) -> dict[str, object]:
    row = gemm(label, 1.0, 1.0, check="FAIL")
    for column in ("Forward TFLOPS", "Backward TFLOPS", "Forward Time (ms)"):
        row[column] = math.nan
    return row


def make_csv(tmp_path: Path, rows: list[dict[str, object]], schema=GEMM_SCHEMA) -> BenchCSV:
    path = tmp_path / "bench.csv"
    write_csv(path, schema, rows)
    return read_csv(path)


def memory_csv(tmp_path: Path) -> BenchCSV:
    row = {
        "label": "add",
        "B": 1,
        "M": 8192,
        "N": 8192,
        "Check": "PASS",
        "Forward GB/s": 3000.0,
        "Forward GB/s_stddev": 4.0,
        "Backward GB/s": 2500.0,
        "Backward GB/s_stddev": 4.0,
        "Forward Time (ms)": 0.1,
        "Backward Time (ms)": 0.2,
        "max_abs_err": 0.0,
    }
    return make_csv(tmp_path, [row], MEMORY_SCHEMA)


# ---------------------------------------------------------------- formulas


def test_combined_step_formula() -> None:
    # 6 * 4096^3 FLOPs over 1 ms + 2 ms
    expected = 6 * DIM**3 / 3e-3 / 1e12
    assert combined_step_tflops(DIM, DIM, DIM, 1.0, 2.0) == pytest.approx(expected, rel=1e-15)
    assert combined_step_tflops(DIM, DIM, DIM, 1.0, 2.0, b=4) == pytest.approx(4 * expected)


def test_combined_step_protocol_example() -> None:
    """6 / (2/F + 4/B): forward 400 and backward 200 TFLOPS make a 240 TFLOPS step."""
    for fwd, bwd, step in ((400, 200, 240.0), (300, 150, 180.0)):
        t_fwd, t_bwd = fwd_ms(fwd), 2 * fwd_ms(bwd)
        assert combined_step_tflops(DIM, DIM, DIM, t_fwd, t_bwd) == pytest.approx(step)


@settings(max_examples=150)
@given(
    fwd=st.floats(min_value=0.01, max_value=5000),
    bwd=st.floats(min_value=0.01, max_value=5000),
    dims=st.tuples(*[st.integers(min_value=1, max_value=32768)] * 3),
    b=st.integers(min_value=1, max_value=64),
)
def test_combined_from_times_equals_the_throughputs_formula(
    fwd: float, bwd: float, dims: tuple[int, int, int], b: int
) -> None:
    m, n, k = dims
    t_fwd = 2 * b * m * n * k / (fwd * 1e12) * 1e3
    t_bwd = 4 * b * m * n * k / (bwd * 1e12) * 1e3
    from_times = combined_step_tflops(m, n, k, t_fwd, t_bwd, b)
    assert from_times == pytest.approx(6.0 / (2.0 / fwd + 4.0 / bwd), rel=1e-9)


# ---------------------------------------------------------------- metric choice


def test_auto_metric(tmp_path: Path) -> None:
    assert resolve_metric(make_csv(tmp_path, [gemm("a", 400, 200)])) == COMBINED_STEP
    assert resolve_metric(make_csv(tmp_path, [gemm("a", 400, None)])) == FORWARD_TFLOPS
    assert resolve_metric(memory_csv(tmp_path)) == FORWARD_GBPS


def test_auto_ignores_backward_of_failed_rows(tmp_path: Path) -> None:
    rows = [gemm("a", 400, None), gemm("b", 400, 200, check="FAIL")]
    assert resolve_metric(make_csv(tmp_path, rows)) == FORWARD_TFLOPS


def test_explicit_metrics(tmp_path: Path) -> None:
    csv = make_csv(tmp_path, [gemm("a", 400, 200)])
    assert resolve_metric(csv, "forward") == FORWARD_TFLOPS
    assert resolve_metric(csv, Metric.COMBINED) == COMBINED_STEP
    assert resolve_metric(csv, COMBINED_STEP) == COMBINED_STEP  # a column name works too
    assert resolve_metric(memory_csv(tmp_path), "gbps") == FORWARD_GBPS


@pytest.mark.parametrize(("kind", "metric"), [("gemm", "gbps"), ("memory", "combined")])
def test_metric_that_does_not_fit(tmp_path: Path, kind: str, metric: str) -> None:
    csv = make_csv(tmp_path, [gemm("a", 400, 200)]) if kind == "gemm" else memory_csv(tmp_path)
    with pytest.raises(ConfigError, match="does not apply"):
        resolve_metric(csv, metric)


def test_unknown_metric(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="auto, forward, combined, gbps"):
        resolve_metric(make_csv(tmp_path, [gemm("a", 400, 200)]), "speed")


# ---------------------------------------------------------------- scores


def test_protocol_example(tmp_path: Path) -> None:
    sc = score(make_csv(tmp_path, [gemm("a", 400, 200), gemm("b", 300, 150)]))
    assert sc.metric == COMBINED_STEP
    assert [s.value for s in sc.shapes] == [pytest.approx(240.0), pytest.approx(180.0)]
    assert sc.aggregate == pytest.approx(207.846, abs=5e-4)
    assert sc.aggregate == pytest.approx(math.sqrt(240 * 180))
    assert (sc.n_pass, sc.n_fail) == (2, 0)
    first = sc.shapes[0]
    assert (first.forward, first.backward) == (400.0, 200.0)
    assert first.forward_ms == pytest.approx(fwd_ms(400))
    assert first.backward_ms == pytest.approx(2 * fwd_ms(200))


def test_combined_comes_from_the_times(tmp_path: Path) -> None:
    row = gemm("a", 400, 200)
    row["Forward TFLOPS"] = 999.0  # inconsistent throughput column: ignored
    row["Backward TFLOPS"] = 1.0
    sc = score(make_csv(tmp_path, [row]), "combined")
    assert sc.shapes[0].value == pytest.approx(240.0)


def test_batched_combined(tmp_path: Path) -> None:
    sc = score(make_csv(tmp_path, [gemm("a", 400, 200, b=8)]))
    assert sc.shapes[0].value == pytest.approx(240.0)


def test_no_backward_means_combined_equals_forward(tmp_path: Path) -> None:
    csv = make_csv(tmp_path, [gemm("a", 400, 200), gemm("b", 300, None)])
    sc = score(csv)
    assert sc.metric == COMBINED_STEP
    assert sc.shapes[1].value == 300.0
    assert sc.shapes[1].backward is None
    assert sc.aggregate == pytest.approx(math.sqrt(240 * 300))


def test_forward_metric(tmp_path: Path) -> None:
    sc = score(make_csv(tmp_path, [gemm("a", 400, 200), gemm("b", 100, 50)]), "forward")
    assert sc.metric == FORWARD_TFLOPS
    assert sc.aggregate == pytest.approx(200.0)


def test_memory_score(tmp_path: Path) -> None:
    sc = score(memory_csv(tmp_path))
    assert sc.metric == FORWARD_GBPS
    assert sc.aggregate == pytest.approx(3000.0)
    assert sc.shapes[0].backward == 2500.0


def test_any_fail_zeroes_the_aggregate(tmp_path: Path) -> None:
    sc = score(make_csv(tmp_path, [gemm("a", 400, 200), failed("b")]))
    assert sc.aggregate == 0.0
    assert (sc.n_pass, sc.n_fail) == (1, 1)
    bad = sc.shapes[1]
    assert (bad.check, bad.value, bad.forward, bad.forward_ms) == ("FAIL", None, None, None)


def test_single_shape_aggregate_is_its_value(tmp_path: Path) -> None:
    assert score(make_csv(tmp_path, [gemm("a", 400, 200)])).aggregate == pytest.approx(240.0)


def test_shape_value_of_failed_row_is_none(tmp_path: Path) -> None:
    csv = make_csv(tmp_path, [gemm("a", 400, 200), failed("b")])
    assert shape_value(csv.rows[1], COMBINED_STEP) is None
    assert shape_value(csv.rows[0], FORWARD_TFLOPS) == 400.0
    with pytest.raises(ConfigError, match="no column"):
        shape_value(csv.rows[0], FORWARD_GBPS)


def test_each_shape_keeps_its_worst_snr(tmp_path: Path) -> None:
    """Rule 4's per-shape SNR: the least of the row's *_snr columns (docs/upstream-loop.md §1)."""
    row = gemm("a", 400, 200) | {"da_snr": 31.5}
    sc = score(make_csv(tmp_path, [row, gemm("b", 300, None)]))
    assert [s.snr for s in sc.shapes] == [31.5, 40.0]
