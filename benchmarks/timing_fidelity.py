"""Timing fidelity and gate study on one GPU (docs/benchmarks.md has the results).

Part 1, fidelity: bf16 forward GEMM (torch.matmul) on four shapes, five independent
passes (each a fresh process), each timed by (a) the upstream quick template (perf_counter
loop: 1 warm-up repeat + 3 repeats of 50 iterations, synchronize at the ends), (b)
triton.testing.do_bench (mean), (c) our engine (runner.worker.bench.gpu.measure_gpu, default
TimingSettings); per shape the min-max spread over the passes and each method's median
time over two references measured in the same passes: graph replay and the profiler's
kernel time.

Part 2, gate study (benchmarks/gate_study.py): A/A and A/B (~3% slower) rounds judged by
the upstream literal rule and by runner.judge.gate.decide.

    PYTHONPATH=.:examples PYTHONUNBUFFERED=1 python benchmarks/timing_fidelity.py \
        --out $OUT/fidelity.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from matmul_timing import SHAPES, label, quick_template_ms, tflops

METHODS = ("quick", "do_bench", "engine")
REFS = ("graph", "profiler")


# ----------------------------------------------------------------- timing methods


def do_bench_ms(fn: Any) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, return_mode="mean"))


def engine_ms(fn: Any) -> tuple[float, dict[str, Any]]:
    from runner.core.spec import TimingSettings
    from runner.worker.bench.gpu import measure_gpu

    t = measure_gpu(fn, TimingSettings(), "cuda")
    info = {
        "method": t.method,
        "stop_reason": t.stop_reason,
        "samples": len(t.samples_ms),
        "iters": t.iters_per_sample,
        "rsd_of_median": t.rsd_of_median,
        "warmup": t.extra.get("warmup"),
        "clocks_before": t.extra.get("clocks_before"),
        "clocks_after": t.extra.get("clocks_after"),
    }
    return t.median_ms, info


def graph_ref_ms(fn: Any, torch: Any, per_call_ms: float) -> float:
    """Independent reference: a graph of k calls (~20 ms), replayed 10 times back to back
    in each of 5 event-timed regions; the median region's time per call."""
    k = max(10, min(200, round(20.0 / max(per_call_ms, 1e-3))))
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(k):
            fn()
    g.replay()
    times = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(10):
            g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / (10 * k))
    return sorted(times)[len(times) // 2]


def profiler_ref_ms(fn: Any, torch: Any, per_call_ms: float) -> float | None:
    """Independent reference: the profiler's summed kernel time per call (no gaps)."""
    from torch.profiler import ProfilerActivity, profile

    n = max(10, min(200, round(20.0 / max(per_call_ms, 1e-3))))
    torch.cuda.synchronize()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                fn()
            torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    us = sum(e.time_range.elapsed_us() for e in prof.events() if e.device_type == cuda)
    return us / 1e3 / n if us > 0 else None


# ----------------------------------------------------------------- one fidelity pass


def one_pass(index: int, rotate_shapes: bool) -> dict[str, Any]:
    """One fresh-process pass: every shape by every method and both references.  The
    method order rotates with the pass; the shape order is fixed (as in a campaign's
    passes) unless ``rotate_shapes``."""
    import torch

    from runner.worker.bench.clocks import sample_clocks

    torch.manual_seed(1234 + index)
    out: dict[str, Any] = {"pass": index, "shapes": {}}
    order = SHAPES[index % 4 :] + SHAPES[: index % 4] if rotate_shapes else SHAPES
    for shape in order:
        m, n, k = shape
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)

        def fn(a: Any = a, b: Any = b) -> Any:
            return torch.matmul(a, b)

        row: dict[str, Any] = {"clocks_before": sample_clocks(0)}
        methods = METHODS[index % 3 :] + METHODS[: index % 3]
        for method in methods:
            if method == "quick":
                row["quick"] = quick_template_ms(fn, torch)
            elif method == "do_bench":
                row["do_bench"] = do_bench_ms(fn)
            else:
                row["engine"], row["engine_info"] = engine_ms(fn)
        row["graph"] = graph_ref_ms(fn, torch, row["engine"])
        try:
            row["profiler"] = profiler_ref_ms(fn, torch, row["engine"])
        except Exception as exc:  # the reference is optional; say why it is missing
            row["profiler"], row["profiler_error"] = None, repr(exc)[:300]
        row["clocks_after"] = sample_clocks(0)
        out["shapes"][label(shape)] = row
        del a, b
    return out


def run_passes(passes: int, rotate_shapes: bool) -> list[dict[str, Any]]:
    """Each pass in a fresh process (like a campaign's pass)."""
    results = []
    for i in range(passes):
        path = Path(os.environ.get("TMPDIR", "/tmp")) / f"fidelity_pass_{os.getpid()}_{i}.json"
        cmd = [sys.executable, __file__, "--child-pass", str(i), "--child-out", str(path)]
        cmd += ["--rotate-shapes"] if rotate_shapes else []
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True)
        results.append(json.loads(path.read_text()))
        print(f"fidelity pass {i + 1}/{passes} done in {time.perf_counter() - t0:.1f} s")
    return results


# ----------------------------------------------------------------- summary tables


def summarize(passes: list[dict[str, Any]]) -> dict[str, Any]:
    summary: dict[str, Any] = {}
    for shape in SHAPES:
        lb = label(shape)
        rows = [p["shapes"][lb] for p in passes]
        refs = {r: _median([row[r] for row in rows if row.get(r)]) for r in REFS}
        per: dict[str, Any] = {"refs_ms": refs}
        for method in METHODS:
            ms = [row[method] for row in rows]
            tf = [tflops(shape, v) for v in ms]
            per[method] = {
                "ms": ms,
                "tflops": tf,
                "spread_pct": 100.0 * (max(tf) - min(tf)) / min(tf),
                "median_ms": _median(ms),
                **{f"ratio_{r}": _median(ms) / refs[r] if refs[r] else None for r in REFS},
            }
        summary[lb] = per
    return summary


def _median(xs: list[float]) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def fidelity_table(summary: dict[str, Any]) -> str:
    lines = [
        "| shape (MxNxK) | method | TFLOPS min-max | spread | time / graph replay "
        "| time / profiler kernels |",
        "|---|---|---|---|---|---|",
    ]
    for lb, per in summary.items():
        for method in METHODS:
            r = per[method]
            rg, rp = r["ratio_graph"], r["ratio_profiler"]
            lines.append(
                f"| {lb} | {method} | {min(r['tflops']):.1f}-{max(r['tflops']):.1f} "
                f"| {r['spread_pct']:.2f}% | {_fmt(rg)} | {_fmt(rp)} |"
            )
    return "\n".join(lines)


def _fmt(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


def environment() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d %H:%M")}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        env.update(gpu=p.name, sms=p.multi_processor_count, cuda=torch.version.cuda)
        env["hip"] = getattr(torch.version, "hip", None)
    return env


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="fidelity.json")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--calib-passes", type=int, default=5)
    ap.add_argument("--deadline-s", type=float, default=450.0, help="whole run, seconds")
    ap.add_argument("--skip-study", action="store_true")
    ap.add_argument(
        "--rotate-shapes", action="store_true", help="rotate the shape order with the pass"
    )
    ap.add_argument("--child-pass", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_pass is not None:
        Path(args.child_out).write_text(json.dumps(one_pass(args.child_pass, args.rotate_shapes)))
        return
    t0 = time.perf_counter()
    report: dict[str, Any] = {"env": environment(), "argv": sys.argv}
    passes = run_passes(args.passes, args.rotate_shapes)
    report["fidelity"] = {"passes": passes, "summary": summarize(passes)}
    print("\n## Fidelity\n\n" + fidelity_table(report["fidelity"]["summary"]), flush=True)
    Path(args.out).write_text(json.dumps(report, indent=1))
    if not args.skip_study:
        from gate_study import run_study, study_table  # its passes only when asked

        deadline = t0 + args.deadline_s
        report["study"] = run_study(args.rounds, args.calib_passes, deadline)
        print("\n## Gate study\n\n" + study_table(report["study"]), flush=True)
    report["wall_s"] = time.perf_counter() - t0
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"\nwrote {args.out} after {report['wall_s']:.0f} s")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
