"""``Timing``: what one timed callable measured (its batches' per-call times, how they
were taken and why sampling stopped).  Its own module so that both engines,
``runner.worker.bench.timing`` (the CPU loop and the dispatcher) and ``runner.worker.bench.gpu``,
build it without importing each other.  Worker-side: no torch, never pydantic.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runner.core.samples import TimingRecord
from runner.core.stats import median, rel_stdev, stdev


@dataclass
class Timing:
    """Per-call times (ms) of each timed batch, their median and spread."""

    samples_ms: list[float]
    method: str  # "perf_counter" | "cuda_events" | "graph_replay"
    stop_reason: str  # "converged" | "budget" | "max_repeats" | "fixed"
    iters_per_sample: int = 1
    extra: dict[str, object] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return median(self.samples_ms)

    @property
    def stddev_ms(self) -> float:
        return stdev(self.samples_ms)

    @property
    def rsd_of_median(self) -> float:
        """Relative standard error of the median (~1.2533 * rsd / sqrt(n))."""
        n = len(self.samples_ms)
        return 1.2533 * rel_stdev(self.samples_ms) / n**0.5 if n > 1 else float("inf")

    def to_dict(self) -> TimingRecord:
        return {
            "samples_ms": list(self.samples_ms),
            "median_ms": self.median_ms,
            "stddev_ms": self.stddev_ms,
            "method": self.method,
            "stop_reason": self.stop_reason,
            "iters_per_sample": self.iters_per_sample,
            "extra": dict(self.extra),
        }
