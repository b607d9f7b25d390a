"""The canary band (CPU) and the CPU canary workload: a benchmark tool
(``benchmarks/canary.py``, used by ``benchmarks/gate_study.py``), not part of a round."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "canary", Path(__file__).resolve().parent.parent / "benchmarks" / "canary.py"
)
assert _SPEC is not None and _SPEC.loader is not None
canary = importlib.util.module_from_spec(_SPEC)
sys.modules.setdefault("canary", canary)
_SPEC.loader.exec_module(canary)
CanaryBand, canary_drifted = canary.CanaryBand, canary.canary_drifted


def _r(gemm: float, copy: float) -> dict[str, float]:
    return {"gemm_ms": gemm, "copy_ms": copy}


def test_band_floor_and_sigma() -> None:
    band = CanaryBand.calibrate([_r(1.0, 2.0), _r(1.001, 2.002), _r(0.999, 1.998)])
    assert band.limit("gemm_ms") == pytest.approx(0.02)  # 3 sigma ~0.3% < the 2% floor
    assert not canary_drifted(_r(1.015, 2.0), band)
    assert canary_drifted(_r(1.03, 2.0), band)
    assert canary_drifted(_r(1.0, 1.9), band)  # faster counts as moved too


def test_band_wide_noise() -> None:
    band = CanaryBand.calibrate([_r(1.0, 1.0), _r(1.1, 1.0), _r(0.9, 1.0)])
    assert band.limit("gemm_ms") == pytest.approx(0.3)
    assert not canary_drifted(_r(1.2, 1.0), band)


def test_band_round_trips_as_dict() -> None:
    band = CanaryBand.calibrate([_r(1.0, 2.0), _r(1.02, 2.04)])
    again = CanaryBand.from_dict(band.to_dict())
    assert again == band
    assert canary_drifted(_r(1.5, 2.0), band.to_dict())


def test_band_needs_two_readings() -> None:
    with pytest.raises(ValueError):
        CanaryBand.calibrate([_r(1.0, 1.0)])


def test_cpu_canary_runs() -> None:
    pytest.importorskip("torch")
    run_canary = canary.run_canary
    from runner.core.spec import TimingSettings

    fast = TimingSettings(warmup_s=0.02, batch_s=0.005, budget_s=0.2, target_rsd=0.05)
    first, second, later = (run_canary("cpu", fast) for _ in range(3))
    r = later
    assert r["gemm_ms"] > 0 and r["copy_ms"] > 0
    assert r["gemm_shape"] == [256, 256, 256]
    assert r["gemm_method"] == "process_time"
    # A band calibrated on two real readings; a third real reading is judged against
    # readings other than itself (a finite move for every metric), and a machine slower
    # or faster by twice the band's limit is drifted.  How far the third reading moves
    # is the machine's business, not the code's: with the suite's other xdist worker
    # beside it, it moved by more than 50% and then by more than a factor of 5.
    band = CanaryBand.calibrate([first, second])
    moves = band.moves(later)
    assert set(moves) == set(band.metrics), (moves, band)
    assert all(math.isfinite(v) and v > -1.0 for v in moves.values()), (first, second, later)
    for metric, sign in (("gemm_ms", 1.0), ("copy_ms", -1.0)):
        moved = band.center[metric] * (1.0 + sign * 2.0 * band.limit(metric))
        if moved > 0:
            assert canary_drifted({**later, metric: moved}, band), (metric, band)
        steady = {m: band.center[m] for m in band.metrics}
        assert not canary_drifted(steady, band)
