"""Measure the empirical peak (``runner.core.empirical_peak``) on this process's GPU:
torch.matmul at one large square shape in bf16, and in FP8 (``torch._scaled_mm``) where
the card and torch support it; the best of a few CUDA-event-timed batches.

``python -m runner.worker.bench.empirical_peak OUT.json [N]`` writes the record."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from runner.core.empirical_peak import EmpiricalPeak
from runner.core.files import write_json_atomic

REPEATS = 20
BATCHES = 5


def _best_ms(torch: ModuleType, fn: Callable[[], object]) -> float:
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(BATCHES):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(REPEATS):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / REPEATS)
    return best


def fnuz_arch(hip: str | None, arch: str) -> bool:
    """Whether a card computes FP8 in the FNUZ formats: AMD's gfx94x (MI300X, MI325X),
    by its ``gcnArchName`` (e.g. "gfx942:sramecc+:xnack-") under a ROCm torch
    (``torch.version.hip`` set); gfx950 (MI350X, MI355X) and NVIDIA cards use the OCP
    ones."""
    return bool(hip) and arch.startswith("gfx94")


def _card_arch(torch: ModuleType) -> str:
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return str(getattr(props, "gcnArchName", ""))


def _fp8(torch: ModuleType, n: int) -> tuple[Callable[[], object] | None, str]:
    """The FP8 GEMM callable (e4m3 in the card's flavour), or None and why not."""
    fnuz = fnuz_arch(torch.version.hip, _card_arch(torch))
    kind = getattr(torch, "float8_e4m3fnuz", None) if fnuz else None
    kind = kind or getattr(torch, "float8_e4m3fn", None)
    if kind is None or not hasattr(torch, "_scaled_mm"):
        return None, "no float8 or torch._scaled_mm in this torch"
    a = torch.randn(n, n, device="cuda").to(kind)
    b = torch.randn(n, n, device="cuda").to(kind).t()
    one = torch.ones((), device="cuda")
    try:
        torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
    except (RuntimeError, TypeError) as exc:
        return None, f"fp8 GEMM unsupported here: {str(exc).splitlines()[0][:160]}"
    return (lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)), ""


def measure(n: int = 8192) -> EmpiricalPeak:
    import torch

    flops = 2.0 * n * n * n
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    tflops = {"bf16": flops / _best_ms(torch, lambda: a @ b) / 1e9}
    notes = []
    fn, why = _fp8(torch, n)
    if fn is not None:
        tflops["fp8"] = flops / _best_ms(torch, fn) / 1e9
    else:
        notes.append(why)
    name = torch.cuda.get_device_properties(torch.cuda.current_device()).name
    rounded = {k: round(v, 1) for k, v in tflops.items()}
    return EmpiricalPeak(name, rounded, (n, n, n), torch.__version__, tuple(notes))


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    peak = measure(int(argv[1]) if len(argv) > 1 else 8192)
    write_json_atomic(out, peak.to_dict())
    print(json.dumps(peak.to_dict()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
