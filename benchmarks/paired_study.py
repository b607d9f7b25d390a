"""Paired, turn-taking workers on one GPU: BASELINE time, quick-round time, and whether the
gate tells A/A, a planted 1% slowdown and a planted 2% speed-up apart, round after round.

A real campaign on a fresh git copy of the example package (``gemm_fp8`` blockwise, Triton
backend, the four Llama-2-7B micro-batch-1 shapes, the manifest's default timing), driven
through the product's functions:

* ``setup``: the campaign and ``runner.flow.baseline.run_baseline`` (timed; 3 passes);
* ``quick``: ``--rounds`` real quick VALIDATE rounds (``runner.flow.validate.validate_round``, a
  no-op candidate: A/A), each timed end to end as a user sees it;
* ``tournament``: ``--rounds`` real tournaments of ``--entries`` A/A entries
  (``runner.flow.validate.validate``; no-op statements that differ), each timed:
  none may be ACCEPTED;
* ``study``: ``--rounds`` study rounds.  Each starts one fresh serving worker per tree
  and process pair, all taking turns on the GPU (``runner.compare.loop.measure_roles``
  with four roles: the head twice, the head with the planted slowdown, the head with
  the planted speed-up's copies) and judges three comparisons through
  ``runner.compare.loop.measure_and_judge`` (more fresh pairs when the gate asks):
  A/A (head vs head), slowdown (head vs head + ``--slow-copies`` extra copies of the
  forward output, about 1% of the step: the candidate must be reported as a
  regression), speed-up (head + ``--fast-copies`` copies, about 2%, vs the head: the
  candidate removes them, it must be ACCEPTED).  Sharing one session saves GPU time (a
  round of four trees took about 4 minutes on an H200); every verdict still comes from
  the rounds' own measure-and-judge path.

Results go to ``--out/paired_study.json`` (appended round by round, so a command that
runs past its time limit loses at most one round; run the same command again to go on:
``--rounds`` is the total wanted, rounds already recorded are skipped).  The campaign
lives under ``--root`` (kept between commands; made again when missing).  Prints a
summary table last.  On one H200, in commands of at most 9 minutes::

    export PYTHONPATH=/tmp/site:.:examples PYTHONUNBUFFERED=1
    python3 benchmarks/paired_study.py setup quick --rounds 3 --root /tmp/ps --out $OUT
    python3 benchmarks/paired_study.py study --rounds 10 --root /tmp/ps --out $OUT
    python3 benchmarks/paired_study.py study --rounds 20 --root /tmp/ps --out $OUT
    python3 benchmarks/paired_study.py tournament --rounds 10 --root /tmp/ps --out $OUT

``--device cpu`` runs the same on the CPU with the TORCH backend and the CPU shape set
(tiny shapes: a check of the script, not a figure).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import runner.cli  # noqa: E402,F401  (import order: newcampaign after the CLI)
from runner.compare.loop import (  # noqa: E402
    Comparison,
    first_samples,
    measure_and_judge,
    measure_roles,
)
from runner.compare.shapes import level_shapes  # noqa: E402
from runner.core.shapes import default_shape_set, shape_set  # noqa: E402
from runner.executors.local import LocalExecutor  # noqa: E402
from runner.flow.baseline import run_baseline  # noqa: E402
from runner.flow.new_campaign import CampaignFields, create_campaign, fresh_example_copy  # noqa: E402
from runner.flow.validate import (  # noqa: E402
    Request,
    validate,
    validate_round,
)
from runner.round.context import RoundPlan  # noqa: E402
from runner.store.campaign import Campaign  # noqa: E402

PLANT_FILE = "turbo_kernels/pytorch/ops/gemm_fp8.py"
PLANT_AT = "        return _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)\n"
LLAMA_MB1 = (
    "Llama-2-7B-qkv-mb1-",
    "Llama-2-7B-attn_out-mb1-",
    "Llama-2-7B-gate_up-mb1-",
    "Llama-2-7B-down-mb1-",
)
STATE = "paired_study.json"


def stamped(message: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {message}", flush=True)


# ---- patches -----------------------------------------------------------------------------
def head_text(campaign: Campaign) -> str:
    """The planted file as it is at the lineage head."""
    lineage = RoundPlan(campaign, LocalExecutor(), print, Path(), 0, "quick").lineage
    return lineage.git("show", f"{lineage.head()}:{PLANT_FILE}") + "\n"


def plant_patch(text: str, copies: int, nonce: int = 0) -> str:
    """A patch onto ``text`` (the planted file) that makes the forward return its output
    after ``copies`` extra copies (extra calls in the step, the kernel untouched);
    ``copies`` 0: A/A, one no-op statement holding ``nonce``.  A comment-only patch no
    longer serves: after one is rolled back, another that differs only in comments is
    the same change and is refused (``runner.judge.resubmission``); a new number literal
    makes each A/A patch a new change that runs the same code."""
    if PLANT_AT not in text:
        raise SystemExit(f"{PLANT_FILE} changed: no line {PLANT_AT.strip()!r} to plant at")
    if copies == 0:
        noop = f"        _ = {nonce}  # A/A: same code\n"
        new = PLANT_AT.replace("        return", noop + "        return")
    else:
        new = (
            "        out = _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)\n"
            f"        for _ in range({copies}):  # planted: extra copies of the output\n"
            "            out = out.clone()\n"
            "        return out\n"
        )
    body = text.replace(PLANT_AT, new)
    return _diff(PLANT_FILE, text, body)


def _diff(path: str, old: str, new: str) -> str:
    import difflib

    lines = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}",
        tofile=f"b/{path}",
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(lines)


# ---- state -------------------------------------------------------------------------------
def load_state(out: Path) -> dict[str, Any]:
    path = out / STATE
    if path.exists():
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    return {"quick": [], "study": []}


def save_state(out: Path, state: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / (STATE + ".tmp")
    tmp.write_text(json.dumps(state, indent=1, default=str), encoding="utf-8")
    tmp.replace(out / STATE)


# ---- phases ------------------------------------------------------------------------------
def setup(args: argparse.Namespace, state: dict[str, Any]) -> Campaign:
    """The campaign and its baseline (reused when ``state`` names one that exists)."""
    known = state.get("campaign")
    if known and (Path(known) / "manifest.yaml").exists():
        return Campaign.load(Path(known))
    stamp = datetime.now().strftime("%Y%m%d_%H%M%S")
    cpu = args.device == "cpu"
    gpu = "cpu" if cpu else "sm90"
    source = fresh_example_copy(args.root / "sources" / f"study-{stamp}")
    fields: dict[str, Any] = {
        "target": "example",
        "source": str(source),
        "target_op": "gemm_fp8",
        "granularity": "blockwise",
        "target_backend": "TORCH" if cpu else "TRITON",
        "target_gpu": gpu,
        "campaign_name": f"paired_study_{gpu}_{stamp}",
        "max_iterations": 119,
    }
    timing = {k: v for k, v in (("budget_s", args.budget_s), ("batch_s", args.batch_s)) if v}
    if cpu:  # the demo's short timing: a check of the script
        timing = {
            "repeats": 3,
            "warmup_s": 0.1,
            "batch_s": 0.03,
            "max_repeats": 8,
            "budget_s": 0.4,
            "target_rsd": 0.01,
            **timing,
        }
    if timing:
        fields["timing"] = timing
    if not cpu:
        set_name = default_shape_set("gemm_fp8", gpu)
        labels = [s.label for s in shape_set(set_name)]
        fields["shape_set"] = set_name
        fields["target_shapes"] = [lb for lb in labels if lb.startswith(LLAMA_MB1)]
    campaign = create_campaign(args.root / "campaigns", CampaignFields(**fields))
    t0 = time.perf_counter()
    result = run_baseline(campaign, LocalExecutor(), passes=args.passes, progress=stamped)
    campaign = Campaign.load(campaign.root)
    m = campaign.manifest
    state.update(
        campaign=str(campaign.root),
        baseline={
            "seconds": round(time.perf_counter() - t0, 1),
            "passes": args.passes,
            "sigma_g_pct": round(100 * (m.sigma_g or 0), 3),
            "shapes": [s.label for s in result.score.shapes],
            "representative": list(m.representative_shapes),
            "shape_seconds": dict(m.shape_seconds),
        },
    )
    return campaign


def quick_rounds(args: argparse.Namespace, campaign: Campaign, state: dict[str, Any]) -> None:
    """Real quick VALIDATE rounds (A/A: a no-op statement), timed end to end."""
    executor = LocalExecutor()
    while len(state["quick"]) < args.rounds:
        campaign = Campaign.load(campaign.root)
        n = campaign.next_round()
        patch = plant_patch(head_text(campaign), 0, n)
        t0 = time.perf_counter()
        request = Request(n, f"A/A {n}: a no-op statement only (timing of a quick round)", patch)
        result = validate_round(campaign, executor, request, progress=stamped)
        gate = result.gate
        state["quick"].append(
            {
                "round": n,
                "seconds": round(time.perf_counter() - t0, 1),
                "status": result.status.value,
                "delta_pct": gate.delta_pct if gate else None,
                "pairs": gate.pairs_used if gate else None,
                "reasons": list(result.reasons),  # a FAILED round says why
            }
        )
        save_state(args.out, state)
        stamped(f"quick round {n}: {result.status.value} in {state['quick'][-1]['seconds']} s")


def tournaments(args: argparse.Namespace, campaign: Campaign, state: dict[str, Any]) -> None:
    """Real tournaments of ``--entries`` A/A entries (no-op statements that differ), timed end
    to end: none may be ACCEPTED (the target: 10 tournaments of 4 A/A entries)."""
    executor = LocalExecutor()
    done = state.setdefault("tournament", [])
    while len(done) < args.rounds:
        campaign = Campaign.load(campaign.root)
        n = campaign.next_round()
        text = head_text(campaign)
        requests = [
            Request(n + k, f"A/A {n + k}: a no-op statement only", plant_patch(text, 0, n + k))
            for k in range(args.entries)
        ]
        t0 = time.perf_counter()
        results = validate(campaign, executor, requests, progress=stamped)
        done.append(
            {
                "rounds": [n, n + args.entries - 1],
                "seconds": round(time.perf_counter() - t0, 1),
                "statuses": [r.status.value for r in results],
                "delta_pct": [r.gate.delta_pct if r.gate else None for r in results],
                "pairs": [r.gate.pairs_used if r.gate else None for r in results],
                "reasons": [list(r.reasons) for r in results],
            }
        )
        save_state(args.out, state)
        stamped(f"tournament {len(done)} ({done[-1]['seconds']} s): {done[-1]['statuses']}")


COMPARISONS = (  # name, reference role, candidate role
    ("aa", "head", "same"),
    ("slow", "head", "slow1"),
    ("fast", "slow2", "same"),
    ("fast15", "slow15", "same"),  # only with --fast15-copies (not in rounds before it)
)


def comparisons(record: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The comparisons a study round judged (rounds before ``fast15`` have three)."""
    return [c for c in COMPARISONS if c[0] in record]


def study_rounds(args: argparse.Namespace, campaign: Campaign, state: dict[str, Any]) -> None:
    executor = LocalExecutor()
    while len(state["study"]) < args.rounds:
        k = len(state["study"]) + 1
        campaign = Campaign.load(campaign.root)
        text = head_text(campaign)
        patches = {
            "head": None,
            "same": plant_patch(text, 0),
            "slow1": plant_patch(text, args.slow_copies),
            "slow2": plant_patch(text, args.fast_copies),
        }
        if args.fast15_copies:
            patches["slow15"] = plant_patch(text, args.fast15_copies)
        record = one_study_round(campaign, executor, patches, k)
        state["study"].append(record)
        save_state(args.out, state)
        verdicts = ", ".join(
            f"{c}: {record[c]['status']} {record[c]['delta_pct']:+.2f}%"
            for c, _, _ in comparisons(record)
        )
        stamped(f"study round {k} ({record['seconds']} s): {verdicts}")


def one_study_round(
    campaign: Campaign, executor: LocalExecutor, patches: dict[str, str | None], k: int
) -> dict[str, Any]:
    from contextlib import ExitStack

    m = campaign.manifest
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="paired-study-") as tmp, ExitStack() as stack:
        rnd = RoundPlan(campaign, executor, lambda msg: None, Path(tmp), 1000 + k, "quick")
        head = rnd.lineage.head()
        trees = {r: stack.enter_context(rnd.lineage.worktree(head, p)) for r, p in patches.items()}
        shapes = level_shapes(m, "quick")
        samples = first_samples(rnd, 2 * m.pairs)
        measured = measure_roles(rnd, trees, shapes, samples)
        record: dict[str, Any] = {"round": k}
        for name, ref, cand in COMPARISONS:
            if ref not in trees:
                continue
            how = Comparison(roles=(ref, cand), files=(f"{name}-ref.csv", f"{name}-cand.csv"))
            pair_trees = {ref: trees[ref], cand: trees[cand]}
            got = measure_and_judge(rnd, pair_trees, shapes, samples, how=how, measured=measured)
            gate = got.gate
            record[name] = {
                "status": gate.decision.value,
                "delta_pct": round(gate.delta_pct, 3),
                "pairs": len(got.paths[cand]),
                "reasons": list(gate.reasons),
                "evidence": gate.evidence.to_dict() if gate.evidence else None,
                "seconds": round(time.perf_counter() - t0, 1),
            }
    record["seconds"] = round(time.perf_counter() - t0, 1)
    return record


# ---- summary -----------------------------------------------------------------------------
def summary(state: dict[str, Any]) -> str:
    lines = ["| what | measured | target |", "|---|---|---|"]
    base = state.get("baseline")
    if base:
        lines.append(
            f"| BASELINE, {base['passes']} passes | {base['seconds']} s, sigma_G "
            f"{base['sigma_g_pct']}% | <= 90 s |"
        )
    quick = state.get("quick", [])
    if quick:
        secs = sorted(q["seconds"] for q in quick)
        lines.append(
            f"| quick VALIDATE round (A/A), {len(quick)} rounds | {secs[0]}-{secs[-1]} s, "
            f"median {secs[len(secs) // 2]} s | <= 60 s |"
        )
        accepted = sum(str(q["status"]).startswith("ACCEPTED") for q in quick)
        lines.append(f"| quick A/A rounds ACCEPTED | {accepted}/{len(quick)} | |")
    study = state.get("study", [])
    if study:
        n = len(study)
        aa_acc = sum(r["aa"]["status"].startswith("ACCEPTED") for r in study)
        aa_reg = sum(r["aa"]["delta_pct"] <= -1.0 for r in study)
        slow = sum(
            not r["slow"]["status"].startswith("ACCEPTED") and r["slow"]["delta_pct"] < 0
            for r in study
        )
        fast = sum(r["fast"]["status"].startswith("ACCEPTED") for r in study)
        lines += [
            f"| A/A rounds: ACCEPTED | {aa_acc}/{n} | <= 1/20 |",
            f"| A/A rounds: regression of 1% or more reported | {aa_reg}/{n} | 0/20 |",
            f"| planted slowdown reported as a regression | {slow}/{n} | >= 19/20 |",
            f"| planted speed-up ACCEPTED | {fast}/{n} | >= 19/20 |",
        ]
        with15 = [r for r in study if "fast15" in r]
        if with15:
            fast15 = sum(r["fast15"]["status"].startswith("ACCEPTED") for r in with15)
            got = f"{fast15}/{len(with15)}"
            lines.append(f"| planted smaller speed-up ACCEPTED | {got} | >= 15/20 |")
        for name, _, _ in COMPARISONS:
            judged = [r[name] for r in study if name in r]
            if not judged:
                continue
            deltas = sorted(j["delta_pct"] for j in judged)
            pairs = sorted(j["pairs"] for j in judged)
            mid = deltas[len(deltas) // 2]
            lines.append(
                f"| {name}: reported gain, min / median / max ({len(judged)} rounds) | "
                f"{deltas[0]:+.2f}% / {mid:+.2f}% / {deltas[-1]:+.2f}% "
                f"(pairs {pairs[0]}-{pairs[-1]}) | |"
            )
        secs = sorted(r["seconds"] for r in study)
        lines.append(f"| one study round (4-5 trees, 3-4 verdicts) | median {secs[n // 2]} s | |")
    tours = state.get("tournament", [])
    if tours:
        n = len(tours)
        accepted = sum(any(s.startswith("ACCEPTED") for s in t["statuses"]) for t in tours)
        entries = sum(len(t["statuses"]) for t in tours)
        secs = sorted(t["seconds"] for t in tours)
        lines += [
            f"| tournaments of A/A entries with an entry ACCEPTED | {accepted}/{n} "
            f"({entries} entries) | 0/10 |",
            f"| one tournament | {secs[0]}-{secs[-1]} s, median {secs[n // 2]} s | <= 2x a "
            "quick round |",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "phases",
        nargs="*",
        default=["setup", "quick", "study"],
        help="setup, quick, study, tournament, summary (default: setup, quick, study)",
    )
    parser.add_argument("--rounds", type=int, default=20, help="total rounds wanted per phase")
    parser.add_argument("--root", type=Path, default=Path("/tmp/paired-study"))
    parser.add_argument("--out", type=Path, required=True, help="folder for paired_study.json")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--passes", type=int, default=3, help="baseline passes")
    parser.add_argument("--budget-s", type=float, help="timing budget per callable")
    parser.add_argument("--batch-s", type=float, help="timed batch length")
    # One copy of the forward output read as about 0.35-0.65% of the combined step on an
    # H200 (the blockwise FP8 backward dominates the step): 3 copies ~1%, 5 ~2%.
    parser.add_argument("--slow-copies", type=int, default=3, help="planted slowdown")
    parser.add_argument("--fast-copies", type=int, default=5, help="planted speed-up")
    parser.add_argument(
        "--fast15-copies",
        type=int,
        default=0,
        help="a smaller planted speed-up (4: about 1.4%%; 0: none)",
    )
    parser.add_argument("--entries", type=int, default=4, help="A/A entries per tournament")
    args = parser.parse_args(argv)
    unknown = set(args.phases) - {"setup", "quick", "study", "tournament", "summary"}
    if unknown:
        parser.error(f"unknown phase(s) {sorted(unknown)}")
    args.root.mkdir(parents=True, exist_ok=True)
    state = load_state(args.out)
    if set(args.phases) - {"summary"}:
        campaign = setup(args, state)
        save_state(args.out, state)
        if "quick" in args.phases:
            quick_rounds(args, campaign, state)
        if "study" in args.phases:
            study_rounds(args, campaign, state)
        if "tournament" in args.phases:
            tournaments(args, campaign, state)
    print(summary(state))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
