"""A graph replay that kills its worker, planted, through a real quick round on one GPU.

MI350 under ROCm 7.1-7.2 kills the process that replays a graph
(docs/measurement.md §2.2).  No such card is reachable, so the crash is planted: round 2's
candidate changes nothing but a SIGSEGV whenever its FP8 GEMM is called while a CUDA/HIP
graph is being captured.  With graphs on, the candidate's worker dies at its first timed
turn; the paired session then measures every pair again with plain launches and the
round is judged as the A/A round it is.  Round 3 is the example's ``scalar_scale.patch``
(a few percent faster on an H200), a round with no crash against the same incumbent: its
verdict and wall time are the reference.  Expected: round 2 judged (ROLLED BACK, never
ACCEPTED: nothing changed), its reasons naming the worker that died by SIGSEGV and the
fallback, its wall time about one worker start-up longer than round 3's.

    PYTHONPATH=.:examples PYTHONUNBUFFERED=1 python benchmarks/graph_crash_gpu.py \
        --out $OUT/graph_crash.json

``--device cpu`` runs the same flow on the CPU with the demo's speed-up as the change
(the TORCH backend's scope), where nothing is captured, so nothing crashes: a check of
the script, not a figure.  Not a test.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

from gpu_campaigns import OPS, PATCH_DIR, PATCHES, run_op, stamped, summarise  # noqa: E402

from runner.executors.local import LocalExecutor  # noqa: E402
from runner.flow.new_campaign import EXAMPLES_DIR  # noqa: E402
from runner.flow.validate import Request, validate_round  # noqa: E402
from runner.store.campaign import Campaign  # noqa: E402

OP_FILE = "turbo_kernels/pytorch/ops/gemm_fp8.py"
CPU_CHANGE = "speedup_reuse_fp8_weight.patch"
CALL = "    return gemm_fp8_impl("
PLANT = (
    "    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():\n"
    "        import os, signal  # planted: a graph replay that kills its process\n"
    "\n"
    "        os.kill(os.getpid(), signal.SIGSEGV)\n"
)


def planted_patch(source: Path) -> str:
    """The crash under capture, as a diff against the checkout of ``source``."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "clone", "-q", str(source), str(tree)], check=True)
        path = tree / OP_FILE
        text = path.read_text(encoding="utf-8")
        if text.count(CALL) != 1:
            raise SystemExit(f"{OP_FILE} no longer has one line {CALL!r}: plant the crash anew")
        path.write_text(text.replace(CALL, PLANT + CALL), encoding="utf-8")
        diff = subprocess.run(
            ["git", "diff"], cwd=tree, capture_output=True, text=True, check=True
        ).stdout
    return diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("/tmp/graph-crash"))
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    record = run_op(args.root, OPS["gemm_fp8"], args.device, args.passes, False, None)
    campaign = Campaign.load(Path(record["campaign"]))
    _, bucket, hypothesis = PATCHES[0]
    change = (PATCH_DIR / PATCHES[0][0]).read_text(encoding="utf-8")
    if args.device == "cpu":  # the TORCH backend: the Triton kernel is out of scope
        hypothesis = "the demo's speed-up: each FP8 weight quantised once, not per call"
        change = (EXAMPLES_DIR / "demo_patches" / CPU_CHANGE).read_text(encoding="utf-8")
    planted = planted_patch(Path(campaign.manifest.source))
    crash = "nothing faster: a crash whenever the FP8 GEMM runs under graph capture"
    executor = LocalExecutor()
    for n, (patch, words) in enumerate([(planted, crash), (change, hypothesis)], start=2):
        campaign = Campaign.load(campaign.root)
        t0 = time.perf_counter()
        request = Request(n, words, patch, bucket=bucket)
        result = validate_round(campaign, executor, request, progress=stamped)
        record[f"round_{n}_s"] = round(time.perf_counter() - t0, 1)
        record["rounds"].append(summarise(result))
        stamped(f"round {n}: {result.status.value}; {' | '.join(result.reasons)[:400]}")
    args.out.write_text(json.dumps(record, indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
