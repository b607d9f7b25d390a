"""What the timing-fidelity and gate studies share (benchmarks/timing_fidelity.py,
benchmarks/gate_study.py): the four bf16 forward GEMM shapes, their labels and
throughput, and the upstream quick template's timing loop."""

from __future__ import annotations

import time
from typing import Any

SHAPES = ((16, 1024, 1024), (128, 4096, 4096), (4096, 4096, 4096), (8192, 8192, 8192))


def label(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    m, n, k = shape
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def quick_template_ms(fn: Any, torch: Any) -> float:
    """Upstream quick template: 1 warm-up repeat + 3 repeats of 50 iterations, host clock,
    synchronize at the ends of each repeat; the mean of the three repeats."""
    times = []
    for rep in range(4):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(50):
            fn()
        torch.cuda.synchronize()
        if rep:
            times.append((time.perf_counter() - t0) * 1e3 / 50)
    return sum(times) / len(times)
