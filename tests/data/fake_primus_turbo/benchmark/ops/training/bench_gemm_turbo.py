"""Fixture benchmark: times gemm_fp8 and writes upstream's CSV columns to --output."""

import argparse
import csv
import platform
import time

import torch
from primus_turbo.pytorch.core.low_precision import Float8QuantConfig, Format, ScalingGranularity
from primus_turbo.pytorch.ops import gemm_fp8

CASES = [("fixture", 1, 16, 688, 1024), ("fixture", 1, 32, 688, 1024)]
COLUMNS = ["TestID", "Platform", "GPU", "Case", "MBS", "M", "N", "K", "Dtype", "Granularity",
           "Check", "Forward Time (ms)", "Forward TFLOPS", "Backward Time (ms)",
           "Backward TFLOPS"]  # fmt: skip


def best_ms(fn, repeats: int = 5) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", choices=["bf16", "fp8"], default="fp8")
    parser.add_argument("--granularity", default="blockwise")
    parser.add_argument("--output", "-o", default="gemm_turbo_fp8.csv")
    args = parser.parse_args()
    gran = ScalingGranularity[args.granularity.upper()]
    config = Float8QuantConfig(Format.E4M3, gran, 128 if "block" in args.granularity else None)
    rows = []
    for i, (case, mbs, m, n, k) in enumerate(CASES, start=1):
        a = torch.randn(m, k).to(torch.bfloat16).requires_grad_(True)
        b = torch.randn(n, k).to(torch.bfloat16).requires_grad_(True)
        out = gemm_fp8(a, b, trans_b=True, config=config)
        ok = torch.allclose(out.float(), a.float() @ b.float().t(), rtol=2e-2, atol=2e-2)
        g = torch.ones_like(out)
        fwd = best_ms(lambda a=a, b=b: gemm_fp8(a, b, trans_b=True, config=config))
        bwd = best_ms(lambda out=out, a=a, b=b, g=g: torch.autograd.grad(
            out, (a, b), g, retain_graph=True))  # fmt: skip
        flops = 2.0 * m * n * k
        rows.append([i, platform.machine(), "cpu", case, mbs, m, n, k, args.dtype, args.granularity,
                     "PASS" if ok else "FAIL", f"{fwd:.4f}", f"{flops / fwd / 1e9:.4f}",
                     f"{bwd:.4f}", f"{2 * flops / bwd / 1e9:.4f}"])  # fmt: skip
        print(f"{case} {m}x{n}x{k}: forward {fwd:.3f} ms, backward {bwd:.3f} ms")
    with open(args.output, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(COLUMNS)
        writer.writerows(rows)
    print(f"Results saved to {args.output}")


if __name__ == "__main__":
    main()
