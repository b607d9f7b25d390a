"""What the cgroup CPU guard costs a GPU worker's turns, through real quick rounds on one GPU.

The local executor starts each serving worker in a cgroup (v2) of its own
(``runner.core.cgroup``) and the host reads the cgroup's CPU time and the worker's process
tree around every timed turn.  Here every round is an A/A quick VALIDATE round (a
no-op candidate, ``paired_study.plant_patch``) of the example's blockwise FP8 GEMM
(Triton, the four Llama-2-7B mb1 shapes), and the arms take turns, round by round:

* ``candidate``: only the candidate's workers in cgroups: the round's paired gain is the
  cgroup's effect on a turn (positive: a worker in a cgroup times faster);
* ``incumbent``: only the incumbent's: the same effect with the sign turned;
* ``both``: every worker in a cgroup (the product's setting);
* ``neither``: no worker in one (the setting before).

Each round records its verdict, paired gain, per-pair gains, wall time and, from its
``artifacts/turns.jsonl``, each role's ``foreign_cpu_s`` per turn (CPU the cgroup used
outside the worker's process tree: CUDA's and Triton's threads and the compiler children
it waits for are in the tree, so an honest worker's should be about 0) and turn lengths.
The campaign is the newest under ``--reuse`` when one is there (a warm machine after
``graph_crash_gpu.py``), else a fresh one with a ``--passes`` BASELINE.  Appends to
``--out`` round by round; ``--budget-s`` starts no round that may end past it (a round
cut short would leave the campaign half a round on).

    PYTHONPATH=.:examples PYTHONUNBUFFERED=1 python benchmarks/cgroup_gpu.py \
        --rounds 6 --out $OUT/cgroup_gpu.json

``--device cpu`` runs the same flow on the CPU (a check of the script, not a figure).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks"), str(ROOT / "examples")]

from gpu_campaigns import OPS, run_op, stamped  # noqa: E402
from paired_study import head_text, plant_patch  # noqa: E402

from runner.core.cgroup import WorkerCgroup  # noqa: E402
from runner.executors.base import LiveWorker, WorkerJob  # noqa: E402
from runner.executors.local import LocalExecutor  # noqa: E402
from runner.flow.validate import Request, validate_round  # noqa: E402
from runner.store.campaign import Campaign  # noqa: E402

ARMS = ("candidate", "incumbent", "both", "neither")
ROUND_GUESS_S = 70.0  # a quick round on one H200 at 9bbdc47: 58-62 s
START = time.perf_counter()


class ArmExecutor(LocalExecutor):
    """The local executor with only the workers of the roles in ``inside`` in cgroups."""

    def __init__(self, inside: tuple[str, ...]) -> None:
        super().__init__()
        self.inside = inside

    def start_worker(self, job: WorkerJob) -> LiveWorker:
        self.cgroups = job.name.rsplit("-", 1)[-1] in self.inside
        return super().start_worker(job)


def arm_roles(arm: str) -> tuple[str, ...]:
    return {"both": ("incumbent", "candidate"), "neither": ()}.get(arm, (arm,))


def room(campaign: Campaign) -> int:
    """Attempts left to ``campaign`` before ``max_iterations``."""
    return (campaign.manifest.max_iterations or 0) - (campaign.next_round() - 1)


def campaign_for(args: argparse.Namespace, record: dict[str, Any]) -> Campaign:
    """The newest campaign under ``--reuse`` with a BASELINE and an attempt left
    (``max_iterations``; its rounds stop when none is left), else a fresh one (a
    fresh BASELINE costs about a minute on one H100)."""
    found = sorted(args.reuse.glob("*/manifest.yaml"), key=lambda p: p.stat().st_mtime)
    for manifest in reversed(found):
        campaign = Campaign.load(manifest.parent)
        if campaign.manifest.sigma_g is not None and room(campaign) > 0:
            record["campaign"] = str(campaign.root)
            record["reused"] = True
            return campaign
    made = run_op(args.root, OPS["gemm_fp8"], args.device, args.passes, False, None)
    record.update(campaign=made["campaign"], reused=False, baseline_s=made["baseline_s"])
    return Campaign.load(Path(made["campaign"]))


def turns_by_role(path: Path) -> dict[str, dict[str, list[float | None]]]:
    """Per role, each turn's ``foreign_cpu_s`` and length (s) from a ``turns.jsonl``."""
    out: dict[str, dict[str, list[float | None]]] = {}
    if not path.is_file():
        return out
    for line in path.read_text(encoding="utf-8").splitlines():
        turn = json.loads(line)
        role = out.setdefault(turn["worker"].rsplit("-", 1)[-1], {"foreign": [], "turn_s": []})
        role["foreign"].append(turn.get("foreign_cpu_s"))
        role["turn_s"].append(round(turn["end"] - turn["start"], 4))
    return out


def one_round(campaign: Campaign, arm: str) -> dict[str, Any]:
    n = campaign.next_round()
    patch = plant_patch(head_text(campaign), 0, n)
    request = Request(n, f"A/A {n}: a no-op statement only; cgroups: {arm}", patch)
    t0 = time.perf_counter()
    result = validate_round(campaign, ArmExecutor(arm_roles(arm)), request, progress=stamped)
    gate = result.gate
    return {
        "round": n,
        "arm": arm,
        "seconds": round(time.perf_counter() - t0, 1),
        "status": result.status.value,
        "delta_pct": gate.delta_pct if gate else None,
        "pairs": gate.pairs_used if gate else None,
        "pair_gains_pct": list(gate.pair_gains_pct) if gate else [],
        "reasons": list(result.reasons),
        "turns": turns_by_role(campaign.artifacts_dir(n) / "turns.jsonl"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--root", type=Path, default=Path("/tmp/cgroup-gpu"))
    parser.add_argument("--reuse", type=Path, default=Path("/tmp/graph-crash"))
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--budget-s", type=float, default=1e9, help="start no round that may end past this"
    )
    args = parser.parse_args(argv)
    probe = WorkerCgroup.create("probe")  # None: no writable cgroup v2 hierarchy here
    record: dict[str, Any] = {"cgroup": str(probe.path) if probe else None, "rounds": []}
    if probe is not None:
        probe.remove()
    campaign = campaign_for(args, record)
    for k in range(args.rounds):
        longest = max([ROUND_GUESS_S] + [r["seconds"] for r in record["rounds"]])
        if time.perf_counter() - START + 1.3 * longest > args.budget_s:
            stamped(f"no time left for another round within --budget-s {args.budget_s}")
            break
        campaign = Campaign.load(campaign.root)
        if room(campaign) < 1:
            stamped("the campaign's max_iterations is reached: run again for a fresh one")
            break
        arm = ARMS[k % len(ARMS)]
        record["rounds"].append(one_round(campaign, arm))
        args.out.write_text(json.dumps(record, indent=1), encoding="utf-8")
        r = record["rounds"][-1]
        stamped(f"round {r['round']} ({arm}): {r['status']} {r['delta_pct']} in {r['seconds']} s")
    for r in record["rounds"]:
        foreign = {k: v["foreign"] for k, v in r["turns"].items()}
        print(r["round"], r["arm"], r["status"], r["delta_pct"], r["seconds"], foreign)
    return 0


if __name__ == "__main__":
    sys.exit(main())
