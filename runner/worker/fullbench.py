"""Our full benchmark: ``python -m runner.worker.fullbench [--target T] --op OP``.

Every shape of a shape set through the worker's own measuring code (correctness check,
then the timing engine), in this process, printing the pinned CSV of the op's schema on
stdout (and writing it to ``--out``).  It is the benchmark command of every example-target
campaign (run in the example source tree, or with ``turbo_kernels`` importable, the
backend chosen by the target's selector variable, e.g. ``TURBO_KERNELS_GEMM_BACKEND=
TRITON``) and of Primus-Turbo quantize campaigns (``--target primus-turbo``: upstream
has no training benchmark for ``quantize_fp8``).  Worker-side: no pydantic.

Exit status: 0 when every shape passed its check, 1 when one failed, 2 on bad input.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.errors import ConfigError
from runner.core.op_info import op_info
from runner.core.shapes import Shape, default_shape_set, shape_set, shapes_by_label
from runner.core.spec import RoundSpec, TimingSettings


def pick(set_name: str, labels: str | None) -> tuple[Shape, ...]:
    if not labels:
        return tuple(shape_set(set_name))
    wanted = [w.strip() for w in labels.split(",") if w.strip()]
    return tuple(shapes_by_label(set_name, wanted, known=True))


def build_spec(args: argparse.Namespace, device: str) -> RoundSpec:
    info = op_info(args.op)
    info.check_granularity(args.granularity)
    set_name = args.shape_set or default_shape_set(args.op, "cpu" if device == "cpu" else "gpu")
    timing = TimingSettings(budget_s=args.budget_s, cache_mode=args.cache_mode)
    options = {"granularity": args.granularity, "backend": args.backend}
    return RoundSpec(
        "fullbench",
        0,
        "baseline",
        0,
        "full",
        args.target,
        args.op,
        options,
        pick(set_name, args.shapes),
        timing,
        device=device,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runner.worker.fullbench", description=__doc__)
    parser.add_argument("--op", required=True, help="gemm, gemm_fp8, grouped_gemm, ...")
    parser.add_argument(
        "--target",
        default="example",
        choices=("example", "primus-turbo"),
        help="whose package to measure: example (turbo_kernels) or primus-turbo "
        "(primus_turbo, e.g. its quantize_fp8, which has no upstream training benchmark)",
    )
    parser.add_argument("--granularity", help="FP8 ops: tensorwise, rowwise, blockwise, ...")
    parser.add_argument("--backend", help="recorded in the options (the selector decides)")
    parser.add_argument("--shape-set", help="default: the op's set for the device")
    parser.add_argument("--shapes", help="comma list of labels of that set (default: all)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--budget-s", type=float, default=TimingSettings.budget_s)
    parser.add_argument("--cache-mode", choices=("hot", "cold"), default="hot")
    parser.add_argument("--out", type=Path, help="also write the CSV here")
    args = parser.parse_args(argv)
    from runner.worker.bench.worker_pass import resolve_device, run_spec

    try:
        spec = build_spec(args, resolve_device(args.device))
    except (ConfigError, KeyError, ValueError) as exc:
        print(f"fullbench: {exc}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="fullbench-") as tmp:
        run_spec(spec, Path(tmp))
        csv = Path(tmp) / BENCHMARK_CSV
        text = csv.read_text(encoding="utf-8")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(csv, args.out)
    sys.stdout.write(text)
    rows = text.splitlines()[1:]
    return 0 if rows and all(",PASS," in f",{r}," for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
