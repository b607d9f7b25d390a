"""What moves a blockwise-FP8 training step between processes (the probe at a17cd5e,
docs/data/history_paired_study_h200.md): buffer placement inside a process, or the process itself?

Each of ``--procs`` fresh processes imports the example package (Triton backend), builds
the ``gemm_fp8`` blockwise op through the product's adapter (``runner.worker.ops.gemm``) and
times its step (forward + backward, one shape) at ``--placements`` placements, in one of
two conditions:

* ``fixed``: the inputs are allocated once and timed ``--placements`` times: what a
  process's timing varies by when nothing moves;
* ``moved``: before each placement the caching allocator's free blocks are returned
  (``torch.cuda.empty_cache``), a pad of random size (0-2 GiB, its own seed per process)
  is allocated, then the inputs again (same values): new device memory each time.

A placement's figure is the median over 7 repetitions of 10 steps (CUDA events).  The
parent prints, per condition, the spread inside each process and the spread of the
per-process means, and writes every figure to ``--out/placement_probe.json``.

``--trace S``: instead, one process runs the step back to back for S seconds, timing
every window of 10 steps, while ``nvidia-smi`` samples the SM clock, power and
temperature every 100 ms (read, never set); it prints how the window times follow the
clock (their correlation, and the time at the lowest and highest clocks) and writes
``--out/clock_trace.json``; ``--graph`` replays the ten steps as one captured CUDA graph
(no host-side launch overhead, as a worker's quick turns replay theirs).

    export PYTHONPATH=.:examples TURBO_KERNELS_GEMM_BACKEND=TRITON
    python3 benchmarks/placement_probe.py --out $OUT
    python3 benchmarks/placement_probe.py --trace 60 --shape attn_out --out $OUT
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {
    "attn_out": (4096, 4096, 4096),
    "qkv": (4096, 12288, 4096),
}


def blockwise_op(name: str) -> tuple[Any, Any]:
    """The example's blockwise ``gemm_fp8`` through the product's adapter (Triton backend
    when TURBO_KERNELS_GEMM_BACKEND says so), and the probe shape ``name``."""
    sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
    from runner.core.shapes import Shape
    from runner.targets.registry import get_target
    from runner.worker.ops.base import load_adapter

    api = get_target("example").load_api()
    op = load_adapter("gemm_fp8", api, {"granularity": "blockwise"})
    m, n, k = SHAPES[name]
    return op, Shape(name, m, n, k)


def child(args: argparse.Namespace) -> None:
    import torch

    op, shape = blockwise_op(args.shape)
    rng = random.Random(args.seed)
    out: list[dict[str, Any]] = []
    held: list[Any] = []
    a = b = g = None
    for placement in range(args.placements):
        if args.condition == "moved" or a is None:
            a = b = g = None
            held.clear()
            torch.cuda.empty_cache()
            pad = rng.randrange(0, 2 << 30, 1 << 20)
            held.append(torch.empty(pad, dtype=torch.uint8, device="cuda"))
            a, b, g = op.inputs(shape, "cuda", seed=1)

        def step(a: Any = a, b: Any = b, g: Any = g) -> None:
            torch.autograd.grad(op.call(a, b), (a, b), g)

        for _ in range(5):
            step()
        torch.cuda.synchronize()
        reps = []
        for _ in range(7):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(10):
                step()
            end.record()
            end.synchronize()
            reps.append(start.elapsed_time(end) / 10)
        out.append(
            {
                "placement": placement,
                "ms": statistics.median(reps),
                "a_ptr": a.data_ptr() % (1 << 40),
            }
        )
    print("RESULT " + json.dumps(out), flush=True)


def trace(args: argparse.Namespace) -> None:
    """Window times of one process against the SM clock nvidia-smi reads meanwhile."""
    import time

    import torch

    op, shape = blockwise_op(args.shape)
    a, b, g = op.inputs(shape, "cuda", seed=1)
    out = op.call(a, b)

    def ten() -> None:  # ten steps: the forward and the backward callables a worker times
        for _ in range(10):
            op.call(a, b)
            torch.autograd.grad(out, (a, b), g, retain_graph=True)

    for _ in range(3):
        ten()
    torch.cuda.synchronize()
    run = ten
    if args.graph:  # replayed as a worker's quick turns replay them: no launch overhead
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            ten()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            ten()
        run = graph.replay
    query = "--query-gpu=clocks.sm,power.draw,temperature.gpu"
    smi = subprocess.Popen(
        ["nvidia-smi", query, "--format=csv,noheader,nounits", "-lms", "100"],
        stdout=subprocess.PIPE,
        text=True,
    )
    t0 = time.monotonic()
    samples: list[tuple[float, float, float, float]] = []

    def read_smi() -> None:
        assert smi.stdout is not None
        for line in smi.stdout:
            parts = [x.strip() for x in line.split(",")]
            samples.append((time.monotonic() - t0, *map(float, parts)))  # type: ignore[arg-type]

    import threading

    threading.Thread(target=read_smi, daemon=True).start()
    windows: list[tuple[float, float]] = []
    while time.monotonic() - t0 < args.trace:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        windows.append((time.monotonic() - t0, start.elapsed_time(end) / 10))
    smi.terminate()
    paired = []
    for at, ms in windows:
        near = min(samples, key=lambda x: abs(x[0] - at)) if samples else None
        if near and abs(near[0] - at) < 0.2:
            paired.append((ms, near[1], near[2], near[3]))
    times = [p[0] for p in paired]
    clocks = [p[1] for p in paired]
    corr = statistics.correlation(times, clocks) if len(set(clocks)) > 1 else float("nan")
    lo, hi = min(clocks), max(clocks)
    at_lo = statistics.fmean(t for t, c in zip(times, clocks, strict=True) if c == lo)
    at_hi = statistics.fmean(t for t, c in zip(times, clocks, strict=True) if c == hi)
    spread = 100 * statistics.stdev(times) / statistics.fmean(times)
    how = " (graph replay)" if args.graph else ""
    print(
        f"{args.shape} trace{how}: {len(windows)} windows of 10 steps over {args.trace} s, "
        f"{len(paired)} matched to a clock sample; window stdev {spread:.2f}%; SM clock "
        f"{lo:.0f}-{hi:.0f} MHz, power {min(p[2] for p in paired):.0f}-"
        f"{max(p[2] for p in paired):.0f} W; corr(time, clock) {corr:+.2f}; "
        f"{at_lo:.3f} ms at {lo:.0f} MHz, {at_hi:.3f} ms at {hi:.0f} MHz"
    )
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"windows": windows, "smi": samples, "paired": paired}
    (args.out / "clock_trace.json").write_text(json.dumps(data))


def parent(args: argparse.Namespace) -> None:
    record: dict[str, Any] = {}
    for shape in args.shapes:
        for condition in ("fixed", "moved"):
            procs = []
            for p in range(args.procs):
                cmd = [sys.executable, __file__, "--child", "--shape", shape]
                cmd += ["--condition", condition, "--seed", str(1000 + p)]
                cmd += ["--placements", str(args.placements)]
                run = subprocess.run(cmd, capture_output=True, text=True, check=False)
                lines = [ln for ln in run.stdout.splitlines() if ln.startswith("RESULT ")]
                if run.returncode or not lines:
                    raise SystemExit(f"child failed ({run.returncode}): {run.stderr[-2000:]}")
                procs.append(json.loads(lines[-1][7:]))
            record[f"{shape}/{condition}"] = procs
            print(describe(shape, condition, procs), flush=True)
            args.out.mkdir(parents=True, exist_ok=True)  # after every condition
            (args.out / "placement_probe.json").write_text(json.dumps(record, indent=1))


def describe(shape: str, condition: str, procs: list[list[dict[str, Any]]]) -> str:
    means = [statistics.fmean(x["ms"] for x in proc) for proc in procs]
    inside = [
        100 * statistics.stdev([x["ms"] for x in proc]) / statistics.fmean([x["ms"] for x in proc])
        for proc in procs
    ]
    between = 100 * statistics.stdev(means) / statistics.fmean(means)
    return (
        f"{shape} {condition}: {len(procs)} processes x {len(procs[0])} placements; "
        f"inside a process stdev {min(inside):.2f}-{max(inside):.2f}% "
        f"(median {statistics.median(inside):.2f}%); per-process means "
        f"{min(means):.3f}-{max(means):.3f} ms, stdev {between:.2f}%"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", action="store_true")
    ap.add_argument("--shape", default="attn_out", choices=sorted(SHAPES))
    ap.add_argument("--shapes", nargs="+", default=["attn_out", "qkv"])
    ap.add_argument("--condition", choices=("fixed", "moved"), default="fixed")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--placements", type=int, default=10)
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--out", type=Path, default=Path("/tmp/placement-probe"))
    ap.add_argument("--trace", type=float, default=0.0, help="seconds of a clock trace")
    ap.add_argument("--graph", action="store_true", help="trace: replay a captured graph")
    args = ap.parse_args()
    if args.trace:
        trace(args)
    elif args.child:
        child(args)
    else:
        parent(args)


if __name__ == "__main__":
    main()
