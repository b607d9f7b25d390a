"""The canary: a fixed reference workload, timed beside a benchmark's measurements
(docs/measurement.md §2.7; ``benchmarks/gate_study.py`` uses it).  A benchmark tool, not
part of a round: the paired rounds compare two roles on the same device turn by turn,
so a device that drifts moves both sides of a pair alike.

A bf16 GEMM 4096^3 and a ~1 GiB device-to-device copy (on the CPU: a float32 GEMM 256^3
and a 16 MiB copy).  A ``CanaryBand`` is calibrated from several readings; a reading
beyond the band (``canary_drifted``) says the device changed under the measurement.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.core.spec import TimingSettings
from runner.core.stats import mean, stdev
from runner.worker.bench.timing import measure

GPU_GEMM = 4096
GPU_COPY_BYTES = 1 << 30
CPU_GEMM = 256
CPU_COPY_BYTES = 16 << 20
METRICS = ("gemm_ms", "copy_ms")
CANARY_SETTINGS = TimingSettings(warmup_s=0.2, batch_s=0.05, budget_s=2.0, target_rsd=0.002)


def run_canary(device: str, settings: TimingSettings = CANARY_SETTINGS) -> dict[str, Any]:
    """Time the reference GEMM and copy on ``device``; per-call ms and rates."""
    import torch

    gpu = device != "cpu"
    n = GPU_GEMM if gpu else CPU_GEMM
    dtype = torch.bfloat16 if gpu else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen)
    nbytes = GPU_COPY_BYTES if gpu else CPU_COPY_BYTES
    src = torch.empty(nbytes // 4, device=device, dtype=torch.float32).uniform_(generator=gen)
    dst = torch.empty_like(src)
    gemm = measure(lambda: torch.matmul(a, b), settings, device)
    copy = measure(lambda: dst.copy_(src), settings, device)
    return {
        "device": device,
        "gemm_shape": [n, n, n],
        "gemm_dtype": str(dtype).removeprefix("torch."),
        "copy_bytes": nbytes,
        "gemm_ms": gemm.median_ms,
        "copy_ms": copy.median_ms,
        "gemm_tflops": 2.0 * n**3 / (gemm.median_ms * 1e-3) / 1e12,
        "copy_gbs": 2.0 * nbytes / (copy.median_ms * 1e-3) / 1e9,  # read + write
        "gemm_method": gemm.method,
        "copy_method": copy.method,
        "gemm_rsd": gemm.rsd_of_median,
        "copy_rsd": copy.rsd_of_median,
    }


@dataclass(frozen=True)
class CanaryBand:
    """The calibrated canary: per metric the mean reading and its relative sigma.  A new
    reading drifted when a metric moved by more than ``max(k_sigma * sigma, floor)``."""

    center: dict[str, float]
    rel_sigma: dict[str, float]
    n: int
    k_sigma: float = 3.0
    floor: float = 0.02
    metrics: tuple[str, ...] = field(default=METRICS)

    @classmethod
    def calibrate(
        cls, readings: Sequence[Mapping[str, Any]], *, k_sigma: float = 3.0, floor: float = 0.02
    ) -> CanaryBand:
        if len(readings) < 2:
            raise ValueError("calibrating a canary band needs at least 2 readings")
        center, rel = {}, {}
        for m in METRICS:
            values = [float(r[m]) for r in readings]
            center[m] = mean(values)
            rel[m] = stdev(values) / center[m] if center[m] else math.inf
        return cls(center, rel, len(readings), k_sigma, floor)

    def limit(self, metric: str) -> float:
        """The relative move beyond which ``metric`` counts as drifted."""
        return max(self.k_sigma * self.rel_sigma[metric], self.floor)

    def moves(self, reading: Mapping[str, Any]) -> dict[str, float]:
        """Relative move of each metric from the band's centre (+ = slower)."""
        return {m: float(reading[m]) / self.center[m] - 1.0 for m in self.metrics}

    def drifted(self, reading: Mapping[str, Any]) -> bool:
        return any(abs(v) > self.limit(m) for m, v in self.moves(reading).items())

    def to_dict(self) -> dict[str, Any]:
        return {
            "center": dict(self.center),
            "rel_sigma": dict(self.rel_sigma),
            "n": self.n,
            "k_sigma": self.k_sigma,
            "floor": self.floor,
            "metrics": list(self.metrics),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CanaryBand:
        return cls(
            center={k: float(v) for k, v in d["center"].items()},
            rel_sigma={k: float(v) for k, v in d["rel_sigma"].items()},
            n=int(d["n"]),
            k_sigma=float(d.get("k_sigma", 3.0)),
            floor=float(d.get("floor", 0.02)),
            metrics=tuple(d.get("metrics", METRICS)),
        )


def canary_drifted(reading: Mapping[str, Any], band: CanaryBand | Mapping[str, Any]) -> bool:
    """True when ``reading`` (from ``run_canary``) is outside ``band`` (or its dict)."""
    if not isinstance(band, CanaryBand):
        band = CanaryBand.from_dict(band)
    return band.drifted(reading)
