"""The checks of final acceptance that judge what was measured or recorded: the full
validation, held-out shapes, the upstream benchmark's CSV, the full test suite, the
lineage."""

from __future__ import annotations

import math
from collections.abc import Mapping

from runner.core.errors import ConfigError, InfrastructureError
from runner.core.outcomes import GateResult, Score
from runner.flow.acceptance_record import Check
from runner.judge.heldout import ShapeGain, judge_heldout, shortfall, unsettled_notes
from runner.render.figures import fmt_gain, scale_for
from runner.store.acceptance import FullBenchmarkInfo, FullSuiteInfo
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, branch_name
from runner.targets.upstream_csv import BENCH_CSV_NAME

COMMIT_PREFIX = "[optimize] "


def validation_check(gate: GateResult, final: Score) -> Check:
    scale = scale_for(gate.metric, [gate.best_aggregate, gate.candidate_aggregate])
    verdict = (
        f"{scale.label(gate.metric)} geomean {scale.value(gate.best_aggregate)} (base) -> "
        f"{scale.value(gate.candidate_aggregate)} (final) ({fmt_gain(gate.delta_pct, gate)}), "
        f"gate {gate.decision.value}"
    )
    if final.n_fail:
        return Check("full validation", False, f"{final.n_fail} shape(s) FAIL; {verdict}")
    why = "; ".join(r.splitlines()[0] for r in gate.reasons)
    return Check("full validation", gate.decision.accepted, verdict + (f": {why}" if why else ""))


def heldout_check(
    base: Score,
    final: Score,
    heldout: list[str],
    work: Mapping[str, float],
    gate: GateResult | None = None,
) -> Check | None:
    """The over-fitting guard on the held-out shapes (never measured by a round,
    docs/protocol.md §5.7, ``runner.judge.heldout``): a held-out shape established 5%
    or more slower than at the base commit (its whole interval; a reading past -5%
    inside its noise is named, not refused), or one that gains clearly less than the
    lesser of its size neighbours among the targets, is over-fitting.  None without
    any held-out shape.  Every shape is judged on the full validation's paired mean
    and 95% interval (the gate's ``evidence``, recorded whatever decided); a shape
    without one fails the check, never judged on a tolerance as wide as sigma_G."""
    gains, unpaired = shape_gains(base, final, work, gate)
    if not any(lb in heldout for lb in [*(g.label for g in gains), *unpaired]):
        return None
    if unpaired:
        return Check("held-out shapes", False, _unpaired_note(unpaired, gate))
    held = [g for g in gains if g.label in heldout]
    targets = [g for g in gains if g.label not in heldout]
    ok, reasons = judge_heldout(held, targets)
    geo = {
        name: 100.0 * math.expm1(sum(g.gain for g in group) / len(group)) if group else 0.0
        for name, group in (("held", held), ("targets", targets))
    }
    detail = f"held-out gain {geo['held']:+.3f}% vs targets {geo['targets']:+.3f}%"
    noisy = unsettled_notes(held)
    if not ok:
        why = "; ".join([f"over-fitting: {'; '.join(reasons)}", detail, *noisy])
        return Check("held-out shapes", False, why)
    near = [s.describe() for h in held if (s := shortfall(h, targets)) is not None]
    return Check("held-out shapes", True, "; ".join([detail, *near, *noisy]))


def shape_gains(
    base: Score,
    final: Score,
    work: Mapping[str, float],
    gate: GateResult | None,
) -> tuple[list[ShapeGain], list[str]]:
    """Each shape's gain from the full validation's paired mean and 95% half-width (the
    gate's ``evidence``: every verdict given two or more pairs records it for every
    shape it judged), and the labels of the shapes measured on both sides without
    one."""
    evidence = gate.evidence.shapes if gate is not None and gate.evidence else {}
    b, f = base.by_label(), final.by_label()
    out: list[ShapeGain] = []
    unpaired: list[str] = []
    for label in b:
        bv, fv = b[label].value, f[label].value if label in f else None
        if not (bv and fv) or label not in work:
            continue
        est = evidence.get(label)
        if est is None or est.half_width_pct is None:
            unpaired.append(label)
            continue
        gain = math.log1p(est.mean_pct / 100.0)
        out.append(ShapeGain(label, work[label], gain, est.half_width_pct / 100.0))
    return out, unpaired


def _unpaired_note(unpaired: list[str], gate: GateResult | None) -> str:
    """Why the held-out rule could not judge: shapes without a paired interval (one pair
    gives none; no pairs at all; or not among the shapes the gate judged)."""
    pairs = len(gate.pair_gains_pct) if gate is not None else 0
    why = {0: "no paired samples", 1: "one pair: no interval"}.get(pairs, "not in the evidence")
    return (
        f"no paired interval for {', '.join(unpaired)} ({why}): the held-out rule judges "
        "each shape on the full validation's paired mean and 95% interval only; run "
        "`campaign accept` again (each of its --passes blocks measures two pairs)"
    )


def extract_csv(log: str) -> tuple[str | None, int]:
    """The CSV a benchmark printed (from its first header line naming TFLOPS or GB/s)
    and how many of its rows are FAIL or ERROR; (None, 0) when it printed none."""
    lines = [ln.strip() for ln in log.splitlines() if ln.count(",") >= 3]
    start = next((i for i, ln in enumerate(lines) if "TFLOPS" in ln or "GB/s" in ln), None)
    if start is None:
        return None, 0
    rows = lines[start:]
    fail = sum(1 for ln in rows[1:] if {"FAIL", "ERROR"} & set(ln.split(",")))
    return "\n".join(rows) + "\n", fail


def benchmark_check(info: FullBenchmarkInfo) -> Check:
    if info.get("returncode") != 0:
        return Check("full benchmark", False, f"exit {info.get('returncode')}: see its log")
    if info.get("csv_error"):
        return Check("full benchmark", False, f"its CSV is unusable: {info['csv_error']}")
    if info.get("csv") is None:
        return Check(
            "full benchmark",
            False,
            f"it wrote no {BENCH_CSV_NAME} and printed no CSV; see full_benchmark.log",
        )
    if info.get("fail"):
        return Check("full benchmark", False, f"{info['fail']} row(s) FAIL or ERROR")
    return Check("full benchmark", True, f"ran ({info['command']}); CSV artifacts/{info['csv']}")


def suite_check(info: FullSuiteInfo) -> Check:
    hits = info.get("during_timed_work") or []
    if hits:  # the pause failed: full validation's timing shared the device
        return Check(
            "full test suite",
            False,
            f"{len(hits)} of {info.get('tests_logged')} test(s) ran while work was timed "
            f"(first: {hits[0]}): the suite shared the device with full validation's "
            "turns, so their timing is not clean; run `campaign accept` again",
        )
    ok = info["returncode"] == 0
    tail = info["tail"].strip().splitlines()[-1:] or [""]
    state = "passed" if ok else f"FAILED (exit {info['returncode']})"
    return Check("full test suite", ok, f"`{info['command']}` {state}: {tail[0]}")


# ---- 4. the branch ---------------------------------------------------------------------
def lineage_check(
    lineage: Lineage, m: Manifest, accepted: list[str | None]
) -> tuple[Check, list[str]]:
    base = m.base_commit or ""
    try:
        commits = lineage.linear_history(base)
    except (InfrastructureError, ConfigError) as exc:
        return Check("branch", False, f"{exc}; the branch must be linear from {base[:12]}"), []
    problems = []
    for c in commits:
        subject = lineage.git("log", "-1", "--format=%B", c)
        if not subject.startswith(COMMIT_PREFIX):
            problems.append(f"commit {c[:12]} does not start with {COMMIT_PREFIX!r}")
    if commits != [c for c in accepted if c]:
        problems.append(
            f"the branch holds {len(commits)} commit(s) but {len(accepted)} round(s) were "
            "accepted; each accepted round must be exactly one commit"
        )
    branch = branch_name(m)
    if m.git_commit and branch:
        at = lineage.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
        if at != lineage.head():
            problems.append(f"branch {branch} is at {at[:12] or 'nothing'}, not the lineage head")
    detail = "; ".join(problems) or f"linear, {len(commits)} [optimize] commit(s) from {base[:12]}"
    return Check("branch", not problems, detail), commits
