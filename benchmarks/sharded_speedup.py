"""Sharded full validation: wall time on one GPU vs sharded over several, same verdicts?

A full validation (incumbent vs candidate, ``2 * --blocks`` process pairs of paired,
turn-taking workers: the product's ``runner.compare.loop.measure_roles``) of the
example package's bf16 GEMM (Triton backend) over eight model shapes (Llama-2-7B and
Llama-3.1-8B, micro-batch 1: QKV, attention out, MLP gate+up, MLP down), run twice:

1. unsharded: all shapes on the first GPU of ``--gpus``;
2. sharded: over all of ``--gpus``, the shapes balanced by the seconds each took in the
   unsharded run (as a campaign balances by the baseline's), every GPU measuring both
   roles of its own shapes, the per-pass shard CSVs merged in shape order.

Incumbent and candidate are the same code (an A/A round), so both runs should judge
every shape "noise" and the round ROLLED_BACK ("merely equal is not an improvement").
Prints the wall times, the speed-up and whether the per-shape verdicts and the gate
decision match; ``--out`` writes the same as JSON.

Imports only torch/numpy/yaml and pydantic-free runner modules (the GPU box has no
pydantic):

    PYTHONPATH=. python benchmarks/sharded_speedup.py --gpus 0,1 --out $OUT/sharded.json
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from runner.compare.loop import measure_roles
from runner.core.artifact_names import BENCHMARK_CSV, INCUMBENT_CSV
from runner.core.outcomes import GateResult
from runner.core.shapes import DENSE_MODELS, Shape, model_gemm_shapes, tiny_gemm_shapes
from runner.core.spec import RoundSpec, TimingSettings
from runner.executors.local import LocalExecutor
from runner.judge.gate import decide
from runner.judge.scoring import score
from runner.measure.host import PlainHost, PlainManifest
from runner.measure.passes import pair_samples, read_passes, shape_seconds, write_merged
from runner.store.leases import acquire, parse_gpus

ROOT = Path(__file__).resolve().parent.parent
MODELS = ("Llama-2-7B", "Llama-3.1-8B")
REGRESS = math.log(1.05)
IMPROVE = math.log(1.02)


def shapes(smoke: bool) -> list[Shape]:
    if smoke:
        return tiny_gemm_shapes()
    return model_gemm_shapes({m: DENSE_MODELS[m] for m in MODELS}, micro_batches=(1,))


def template(budget_s: float, warmup_s: float, smoke: bool) -> RoundSpec:
    timing = TimingSettings(warmup_s=warmup_s, budget_s=budget_s)
    options = {"backend": backend(smoke), "granularity": None}
    device = "cpu" if smoke else "auto"
    return RoundSpec(
        "sharded-speedup",
        2,
        "incumbent",
        0,
        "full",
        "example",
        "gemm",
        options,
        (),
        timing,
        device=device,
    )


def backend(smoke: bool) -> str:
    return "TORCH" if smoke else "TRITON"


def example_tree(root: Path) -> Path:
    tree = root / "tree"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "build")
    shutil.copytree(ROOT / "examples", tree, ignore=ignore)
    return tree


def measure(
    tmp: Path,
    template: RoundSpec,
    job_env: Any,
    trees: dict[str, Path],
    chosen: list[Shape],
    gpus: Sequence[int],
    samples: int,
    seconds: dict[str, float],
) -> dict[str, list[Path]]:
    """The product's measure path (``runner.compare.loop.measure_roles``): paired,
    turn-taking workers per GPU, shards balanced by ``seconds`` when given."""
    rnd = PlainHost(
        tmp,
        LocalExecutor(),
        template,
        job_env,
        gpus=tuple(gpus),
        manifest=PlainManifest(shape_seconds=seconds),
    )
    paths = measure_roles(rnd, trees, chosen, samples)
    for line in rnd.said:
        print(line)
    return paths


def judge(tmp: Path, paths: dict[str, list[Path]]) -> GateResult:
    inc = read_passes(paths["incumbent"], None)
    cand = read_passes(paths["candidate"], None)
    inc_score = score(write_merged(tmp / INCUMBENT_CSV, inc), "auto")
    cand_score = score(write_merged(tmp / BENCHMARK_CSV, cand), inc_score.metric)
    pairs = pair_samples(inc, cand, inc_score.metric)
    return decide(inc_score, cand_score, sigma_g=None, pairs=pairs)


def verdicts(gate: GateResult) -> dict[str, str]:
    """Per shape: FAIL, regressed (<= -4.8%, the 5% rule), improved (>= +2%) or noise."""
    out = {}
    for s in gate.shapes:
        if s.check != "PASS" or s.best is None or s.candidate is None:
            out[s.label] = "FAIL"
            continue
        d = math.log(s.candidate / s.best)
        out[s.label] = "regressed" if d <= -REGRESS else "improved" if d >= IMPROVE else "noise"
    return out


def timed_round(name: str, work: Path, measure: Any) -> dict[str, Any]:
    tmp = work / name
    tmp.mkdir()
    t0 = time.perf_counter()
    paths = measure(tmp)
    wall = time.perf_counter() - t0
    gate = judge(tmp, paths)
    deltas = {s.label: s.delta_pct for s in gate.shapes}
    print(f"{name}: {wall:.1f} s, decision {gate.decision.value}, {gate.delta_pct:+.3f}%")
    return {
        "paths": paths,
        "wall_s": wall,
        "decision": gate.decision.value,
        "delta_pct": gate.delta_pct,
        "verdicts": verdicts(gate),
        "shape_delta_pct": deltas,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="0,1", help="GPU indices, e.g. 0,1")
    parser.add_argument("--blocks", type=int, default=1, help="B C C B blocks (default 1)")
    parser.add_argument("--budget-s", type=float, default=1.0, help="timing budget per callable")
    parser.add_argument("--warmup-s", type=float, default=0.3)
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument(
        "--smoke", action="store_true", help="CPU, TORCH backend, tiny shapes: checks the script"
    )
    args = parser.parse_args(argv)
    gpus = parse_gpus(args.gpus)
    chosen = shapes(args.smoke)
    spec = template(args.budget_s, args.warmup_s, args.smoke)
    selector = backend(args.smoke)

    def job_env(tree: Path) -> dict[str, str]:
        return {"PYTHONPATH": str(tree), "TURBO_KERNELS_GEMM_BACKEND": selector}

    with acquire(gpus, "sharded-speedup", wait=60), tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tree = example_tree(work)
        trees = {"incumbent": tree, "candidate": tree}
        samples = 2 * args.blocks
        single = timed_round(
            "unsharded",
            work,
            lambda t: measure(t, spec, job_env, trees, chosen, gpus[:1], samples, {}),
        )
        seconds = shape_seconds(single.pop("paths")["incumbent"])
        print("measured seconds per shape:", seconds)
        sharded = timed_round(
            "sharded",
            work,
            lambda t: measure(t, spec, job_env, trees, chosen, gpus, samples, seconds),
        )
        sharded.pop("paths")
    result = summary(gpus, chosen, single, sharded)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["verdicts_match"] else 1


def summary(
    gpus: list[int], chosen: list[Shape], single: dict[str, Any], sharded: dict[str, Any]
) -> dict[str, Any]:
    speedup = single["wall_s"] / sharded["wall_s"]
    match = single["verdicts"] == sharded["verdicts"]
    same_decision = single["decision"] == sharded["decision"]
    print(f"\nspeed-up on {len(gpus)} GPUs: {speedup:.2f}x")
    print(f"{'shape':<32} {'unsharded':>10} {'sharded':>10}  verdicts")
    for s in chosen:
        a, b = single["shape_delta_pct"][s.label], sharded["shape_delta_pct"][s.label]
        va, vb = single["verdicts"][s.label], sharded["verdicts"][s.label]
        print(f"{s.label:<32} {a:>+9.3f}% {b:>+9.3f}%  {va} / {vb}")
    print(f"per-shape verdicts match: {match}; gate decisions match: {same_decision}")
    return {
        "gpus": gpus,
        "shapes": [s.to_dict() for s in chosen],
        "unsharded": single,
        "sharded": sharded,
        "speedup": speedup,
        "verdicts_match": match,
        "decisions_match": same_decision,
        "python": sys.version.split()[0],
    }


if __name__ == "__main__":
    sys.exit(main())
