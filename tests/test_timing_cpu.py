"""measure_cpu: stops on noise, on budget or at max_repeats; sane numbers on real work."""

from __future__ import annotations

import time

import pytest

from runner.core.spec import TimingSettings
from runner.worker.bench.gpu import batch_iters, flush_bytes_for, stop_reason
from runner.worker.bench.timing import Timing, measure, measure_cpu


def _work() -> int:
    return sum(i * i for i in range(2000))


def test_real_workload_sane() -> None:
    t = measure_cpu(_work, TimingSettings(warmup_s=0.02, batch_s=0.005, budget_s=1.0))
    assert t.method == "process_time"
    assert len(t.samples_ms) >= 3
    assert 1e-4 < t.median_ms < 50  # ~0.1 ms of Python on any CI machine
    assert t.iters_per_sample >= 1
    assert t.stop_reason in ("converged", "budget", "max_repeats")


def test_stops_on_noise_when_target_is_loose() -> None:
    t = measure_cpu(_work, TimingSettings(warmup_s=0.01, batch_s=0.002, target_rsd=1.0))
    assert t.stop_reason == "converged"
    assert len(t.samples_ms) == 3


def test_stops_on_budget() -> None:
    s = TimingSettings(
        warmup_s=0.01, batch_s=0.002, target_rsd=0.0, budget_s=0.05, max_repeats=10**6
    )
    t0 = time.perf_counter()
    t = measure_cpu(_work, s)
    assert t.stop_reason == "budget"
    assert time.perf_counter() - t0 < 2.0


def test_stops_at_max_repeats() -> None:
    s = TimingSettings(warmup_s=0.01, batch_s=0.001, target_rsd=0.0, budget_s=60, max_repeats=5)
    t = measure_cpu(_work, s)
    assert t.stop_reason == "max_repeats" and len(t.samples_ms) == 5


def test_measure_dispatches_to_cpu() -> None:
    t = measure(_work, TimingSettings(warmup_s=0.01, batch_s=0.002, target_rsd=1.0), "cpu")
    assert t.method == "process_time"


def test_the_clock_counts_work_not_waiting() -> None:
    """CPU time: time spent off the CPU (a sleep here; preemption by another process
    in practice) is not counted, the busy work is."""
    s = TimingSettings(warmup_s=0.01, iters_per_repeat=2, target_rsd=1.0)
    idle = measure_cpu(lambda: time.sleep(0.005), s)
    assert idle.median_ms < 1.0

    def busy() -> None:
        end = time.process_time() + 0.004
        while time.process_time() < end:
            pass

    assert 3.5 < measure_cpu(busy, s).median_ms < 20


# Pure helpers of the GPU engine (no GPU needed).


def test_gpu_stop_reason() -> None:
    s = TimingSettings(repeats=3, target_rsd=0.005, budget_s=1.0)
    assert stop_reason([1.0, 1.0], s, 0.0, 30) is None
    assert stop_reason([1.0, 1.0, 1.0], s, 0.0, 30) == "converged"
    noisy = [1.0, 2.0, 1.0]
    assert stop_reason(noisy, s, 0.5, 30) is None
    assert stop_reason(noisy, s, 1.5, 30) == "budget"
    assert stop_reason(noisy, s, 0.0, 3) == "max_repeats"
    assert stop_reason([1.0, 1.0, 1.0], s, 5.0, 3) == "converged"


def test_gpu_batch_iters() -> None:
    assert batch_iters(1.0, TimingSettings(batch_s=0.05)) == 50
    assert batch_iters(1e-6, TimingSettings(batch_s=0.05)) == 100_000
    assert batch_iters(100.0, TimingSettings(batch_s=0.05)) == 1
    assert batch_iters(1.0, TimingSettings(iters_per_repeat=7)) == 7


@pytest.mark.parametrize(
    ("name", "mib"),
    [
        ("NVIDIA H200", 256),
        ("NVIDIA H100 80GB HBM3", 256),
        ("AMD Instinct MI300X", 512),
        ("AMD Instinct MI325X", 512),
        ("AMD Instinct MI355X", 512),
        ("Some Future GPU", 512),
    ],
)
def test_flush_sizes(name: str, mib: int) -> None:
    assert flush_bytes_for(name) == mib << 20


def test_flush_grows_with_a_large_l2() -> None:
    assert flush_bytes_for("NVIDIA H200", l2_bytes=200 << 20) == 800 << 20


def test_timing_rsd_of_median() -> None:
    assert Timing([1.0], "x", "y").rsd_of_median == float("inf")
    assert Timing([1.0, 1.0, 1.0], "x", "y").rsd_of_median == 0.0
