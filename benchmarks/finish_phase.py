"""How long a paired measurement's finish takes on the CPU: from the end of its last
timed turn to the return of ``runner.measure.paired.measure_paired`` (the workers' fresh
steps, re-checks and files), for one checkout of this project.

Four process pairs of the example package's blockwise FP8 GEMM (TORCH backend, three
demo-sized shapes), one wave, through the local executor.  Run it for two checkouts
one after the other, alternating, to compare them on one machine::

    git worktree add /tmp/wt-old <commit>
    for i in 1 2; do for r in /tmp/wt-old .; do
        python benchmarks/finish_phase.py --root $r --tmp /tmp/finish-phase; done; done

Prints one JSON line: the checkout, the whole measurement's seconds and the finish's.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root",
        type=Path,
        default=Path(__file__).resolve().parent.parent,
        help="the checkout whose runner to time (default: this one)",
    )
    parser.add_argument("--tmp", type=Path, required=True, help="scratch folder (emptied)")
    parser.add_argument("--pairs", type=int, default=4)
    args = parser.parse_args(argv)
    root = args.root.resolve()
    sys.path[:0] = [str(root), str(root / "examples")]
    import runner.cli  # import order: newcampaign after the CLI
    from runner.core.shapes import Shape
    from runner.core.spec import RoundSpec, TimingSettings
    from runner.executors.local import LocalExecutor
    from runner.flow.new_campaign import fresh_example_copy
    from runner.measure.host import PlainHost
    from runner.measure.paired import measure_paired

    if not runner.cli.__file__.startswith(str(root)):
        raise SystemExit(f"runner imported from {runner.cli.__file__}, not from {root}")
    shutil.rmtree(args.tmp, ignore_errors=True)
    timing = TimingSettings(
        repeats=3, warmup_s=0.05, batch_s=0.02, max_repeats=6, budget_s=0.3, target_rsd=0.05
    )
    tree = fresh_example_copy(args.tmp / "tree")
    options = {"backend": "TORCH", "granularity": "blockwise"}
    template = RoundSpec(
        "finish-phase",
        2,
        "incumbent",
        0,
        "full",
        "example",
        "gemm_fp8",
        options,
        (),
        timing,
        device="cpu",
    )
    host = PlainHost(
        args.tmp / "round", LocalExecutor(), template, lambda t: {"PYTHONPATH": str(t)}
    )
    shapes = [
        Shape("s1", 64, 1024, 1024),
        Shape("s2", 64, 2752, 1024),
        Shape("s3", 128, 1024, 2048),
    ]
    trees = {"incumbent": tree, "candidate": tree}
    t0 = time.time()
    measure_paired(host, trees, shapes, ["incumbent", "candidate"], pairs=args.pairs)
    end = time.time()
    lines = (host.tmp / "turns.jsonl").read_text(encoding="utf-8").splitlines()
    last = max(json.loads(line)["end"] for line in lines)
    print(
        json.dumps(
            {"root": str(root), "total_s": round(end - t0, 2), "finish_s": round(end - last, 2)}
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
