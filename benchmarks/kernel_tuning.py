"""Launch-configuration sweep of the example package's Triton GEMM kernels on one GPU.

For the bf16 GEMM (``turbo_kernels.triton.gemm_kernel``) and the blockwise FP8 GEMM
(``turbo_kernels.triton.gemm_fp8_kernel``, 1x128 activation and 128x128 weight scales),
forward only, ``c = a @ b.T`` with a (M, K) and b (N, K): every candidate configuration is
checked against a float32 reference (SNR) and timed with our engine
(``runner.worker.bench.gpu.measure_gpu``), in one process, shape by shape.  In the same run and
with the same engine, the references: ``torch.matmul`` in bf16 and ``torch._scaled_mm``
with tensorwise FP8 scales (the vendor library's FP8 GEMM), plus our tensorwise Triton FP8
kernel.  A configuration that does not fit the GPU (shared memory, registers) is recorded
as such, not skipped silently.

    PYTHONPATH=.:examples PYTHONUNBUFFERED=1 python benchmarks/kernel_tuning.py \
        --out $OUT/tuning.json

``--smoke`` runs the same code on tiny shapes without a GPU (``TRITON_INTERPRET=1``, the
Triton interpreter; no timing), to check the script before spending device time.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 14336, 4096))
SMOKE_SHAPES = ((64, 96, 256),)

# BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
BF16_CONFIGS = (
    (128, 128, 64, 8, 8, 3),
    (128, 128, 64, 8, 4, 4),
    (128, 256, 64, 8, 8, 3),
    (128, 256, 64, 8, 8, 4),
    (256, 128, 64, 8, 8, 3),
    (128, 128, 128, 8, 8, 3),
    (64, 256, 64, 8, 4, 4),
    (128, 256, 64, 16, 8, 3),
)
FP8_CONFIGS = (
    (128, 128, 128, 8, 8, 3),
    (128, 128, 128, 8, 4, 4),
    (128, 256, 128, 8, 8, 3),
    (128, 256, 128, 8, 8, 4),
    (256, 128, 128, 8, 8, 3),
    (128, 128, 64, 8, 4, 5),
    (64, 128, 128, 8, 4, 4),
    (128, 128, 128, 16, 8, 4),
)
KEYS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "num_warps", "num_stages")
SCALE_BLOCK = 128
SNR_FLOOR_DB = 40.0  # every kernel against its float32 reference (same FP8 operands)


def label(shape: tuple[int, int, int]) -> str:
    return "x".join(map(str, shape))


def tflops(shape: tuple[int, int, int], ms: float) -> float:
    m, n, k = shape
    return 2.0 * m * n * k / (ms * 1e-3) / 1e12


def snr_db(out: Any, ref: Any) -> float:
    ref = ref.double()
    noise = (out.double() - ref).pow(2).sum().item()
    return math.inf if noise == 0 else 10 * math.log10(ref.pow(2).sum().item() / noise)


class Bench:
    """Times callables with the engine on a GPU, or once by the host clock in smoke mode."""

    def __init__(self, device: str, budget_s: float) -> None:
        self.device = device
        if device != "cpu":
            from runner.core.spec import TimingSettings

            self.settings = TimingSettings(warmup_s=0.3, budget_s=budget_s)

    def __call__(self, fn: Callable[[], object]) -> dict[str, Any]:
        if self.device == "cpu":
            t0 = time.perf_counter()
            fn()
            return {"median_ms": (time.perf_counter() - t0) * 1e3, "method": "smoke"}
        from runner.worker.bench.gpu import measure_gpu

        t = measure_gpu(fn, self.settings, self.device)
        clocks = t.extra.get("clocks_after") or {}
        return {
            "median_ms": t.median_ms,
            "rsd_of_median": t.rsd_of_median,
            "method": t.method,
            "stop_reason": t.stop_reason,
            "clocks_after": clocks,
        }


def _operands(torch: Any, shape: tuple[int, int, int], device: str) -> tuple[Any, Any]:
    """bf16 operands; float16 in smoke mode (the Triton interpreter mis-handles bf16)."""
    m, n, k = shape
    dtype = torch.float16 if device == "cpu" else torch.bfloat16
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn((m, k), generator=gen).to(device, dtype)
    b = torch.randn((n, k), generator=gen).to(device, dtype)
    return a, b


def sweep(
    kind: str,
    shape: tuple[int, int, int],
    configs: tuple[tuple[int, ...], ...],
    bench: Bench,
    torch: Any,
) -> list[dict[str, Any]]:
    """Every configuration of ``kind`` ("bf16" or "fp8_blockwise") on ``shape``."""
    from turbo_kernels.pytorch.core.low_precision import ScalingGranularity, float8_e4m3
    from turbo_kernels.pytorch.kernels.quantization import dequantize_fp8, quantize_fp8
    from turbo_kernels.triton import gemm_fp8_kernel, gemm_kernel

    a, b = _operands(torch, shape, bench.device)
    if kind == "bf16":
        module: Any = gemm_kernel
        ref = a.float() @ b.float().t()

        def call() -> Any:
            return gemm_kernel.gemm_triton(a, b, a.dtype)

    else:
        module = gemm_fp8_kernel
        gran = ScalingGranularity.BLOCKWISE
        fp8 = float8_e4m3(bench.device)
        qa, sa = quantize_fp8(a, fp8, gran, SCALE_BLOCK)
        qb, sb = quantize_fp8(b, fp8, gran, SCALE_BLOCK, weight=True)
        # The reference is the same quantised operands, dequantised, in float32: the
        # check is on the kernel, not on FP8 quantisation error.
        deq_a = dequantize_fp8(qa, sa, gran, SCALE_BLOCK)
        deq_b = dequantize_fp8(qb, sb, gran, SCALE_BLOCK, weight=True)
        ref = deq_a.float() @ deq_b.float().t()

        def call() -> Any:
            return gemm_fp8_kernel.gemm_fp8_blockwise_triton(
                qa, sa, qb, sb, torch.bfloat16, SCALE_BLOCK, SCALE_BLOCK
            )

    saved = dict(module.GEMM_CONFIG)
    rows = []
    try:
        for cfg in configs:
            module.GEMM_CONFIG.update(dict(zip(KEYS, cfg, strict=True)))
            row: dict[str, Any] = {"kind": kind, "shape": label(shape), "config": list(cfg)}
            try:
                snr = snr_db(call().float(), ref)
            except Exception as exc:  # out of resources etc.: record it
                row.update(status="does not run", error=f"{type(exc).__name__}: {exc}"[:300])
                rows.append(row)
                print(f"  {kind} {label(shape)} {cfg}: {row['error'][:120]}", flush=True)
                continue
            row["snr_db"] = snr
            if not snr >= SNR_FLOOR_DB:
                row["status"] = f"wrong: SNR {snr:.1f} dB < {SNR_FLOOR_DB:.0f}"
            else:
                row.update(status="ok", **bench(call))
                row["tflops"] = tflops(shape, row["median_ms"])
            rows.append(row)
            print(f"  {kind} {label(shape)} {cfg}: {row['status']} {row.get('tflops', 0):.1f}")
    finally:
        module.GEMM_CONFIG.clear()
        module.GEMM_CONFIG.update(saved)
    return rows


def references(shape: tuple[int, int, int], bench: Bench, torch: Any) -> list[dict[str, Any]]:
    """torch.matmul bf16, torch._scaled_mm tensorwise FP8, our tensorwise Triton FP8."""
    from turbo_kernels.pytorch.core.low_precision import ScalingGranularity, float8_e4m3
    from turbo_kernels.pytorch.kernels.quantization import quantize_fp8
    from turbo_kernels.triton import gemm_fp8_kernel

    a, b = _operands(torch, shape, bench.device)
    fp8 = float8_e4m3(bench.device)
    gran = ScalingGranularity.TENSORWISE
    qa, sa = quantize_fp8(a, fp8, gran)
    qb, sb = quantize_fp8(b, fp8, gran, weight=True)
    calls: dict[str, Callable[[], Any]] = {
        "torch.matmul bf16": lambda: torch.matmul(a, b.t()),
        "triton fp8 tensorwise (ours)": lambda: gemm_fp8_kernel.gemm_fp8_scaled_triton(
            qa, sa, qb, sb, torch.bfloat16, False
        ),
    }
    if bench.device != "cpu":  # _scaled_mm has no CPU FP8 kernel everywhere
        calls["torch._scaled_mm fp8 tensorwise"] = lambda: torch._scaled_mm(
            qa, qb.t(), scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16
        )
    rows = []
    for name, fn in calls.items():
        row: dict[str, Any] = {"kind": name, "shape": label(shape)}
        try:
            row.update(status="ok", **bench(fn))
            row["tflops"] = tflops(shape, row["median_ms"])
        except Exception as exc:  # record what failed
            row.update(status="does not run", error=f"{type(exc).__name__}: {exc}"[:300])
        rows.append(row)
        print(f"  {name} {label(shape)}: {row['status']} {row.get('tflops', 0):.1f}")
    return rows


def best(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    """Per configuration of ``kind``, the geometric mean of TFLOPS over the shapes where
    every one ran; the best first."""
    by_cfg: dict[tuple[int, ...], list[float]] = {}
    shapes = {r["shape"] for r in rows if r["kind"] == kind}
    for r in rows:
        if r["kind"] == kind and r["status"] == "ok":
            by_cfg.setdefault(tuple(r["config"]), []).append(r["tflops"])
    full = {c: v for c, v in by_cfg.items() if len(v) == len(shapes)}
    ranked = sorted(full, key=lambda c: -math.exp(sum(map(math.log, full[c])) / len(full[c])))
    return {
        "ranking": [
            {
                "config": list(c),
                "geomean_tflops": math.exp(sum(map(math.log, full[c])) / len(full[c])),
            }
            for c in ranked
        ]
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--budget-s", type=float, default=1.0, help="engine budget per call")
    parser.add_argument("--smoke", action="store_true", help="tiny shapes, Triton interpreter")
    args = parser.parse_args(argv)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    import torch

    device = "cpu" if args.smoke else "cuda"
    bench = Bench(device, args.budget_s)
    shapes = SMOKE_SHAPES if args.smoke else SHAPES
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for shape in shapes:
        rows += references(shape, bench, torch)
        rows += sweep("bf16", shape, BF16_CONFIGS, bench, torch)
        rows += sweep("fp8_blockwise", shape, FP8_CONFIGS, bench, torch)
    result = {
        "device": torch.cuda.get_device_name(0) if device != "cpu" else "cpu (smoke)",
        "torch": torch.__version__,
        "triton": __import__("triton").__version__,
        "budget_s": args.budget_s,
        "rows": rows,
        "best": {k: best(rows, k) for k in ("bf16", "fp8_blockwise")},
        "wall_s": time.perf_counter() - t0,
    }
    args.out.write_text(json.dumps(result, indent=1, default=str), encoding="utf-8")
    for kind, ranking in result["best"].items():
        print(kind, "best:", ranking["ranking"][:3])
    print(f"wall {result['wall_s']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
