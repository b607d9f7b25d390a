"""``rounds/round-N/summary.md`` (docs/protocol.md §6.1 and §8.5).

Sections, as ``## `` headings, in this order: Hypothesis; Single change; Results;
Decision; Attribution; Next direction; Rollback Analysis (rollbacks only);
Real-training transfer check.  Round-1 says that no code changed and that its
decision is BASELINE.
"""

from __future__ import annotations

from pathlib import Path

from runner.core.outcomes import GateResult, Interval, RoundResult, Status, TransferCheck
from runner.judge.inconclusive import advice, inconclusive
from runner.render.escape import md_text
from runner.render.figures import DASH, fmt_gain, fmt_pct, scale_for
from runner.render.kernel_facts import facts_markdown
from runner.render.markdown import (
    INCUMBENT,
    RECORDED_BASELINE,
    aggregate_over,
    decision_reasons,
    passing,
    pct_change,
    shape_table,
    tradeoff_note,
    vetoed_unmeasured,
)
from runner.store.manifest import Manifest

SECTIONS = (
    "Hypothesis",
    "Single change",
    "Results",
    "Decision",
    "Attribution",
    "Next direction",
    "Rollback Analysis",
    "Real-training transfer check",
)
NO_CHANGE = "No code changed: round-1 is the baseline"


def _section(title: str, body: str) -> str:
    return f"## {title}\n\n{body.strip() or DASH}\n"


def _is_baseline(result: RoundResult) -> bool:
    return result.status == Status.BASELINE or result.round == 1


def _hypothesis(result: RoundResult) -> str:
    if _is_baseline(result):
        return "None: round-1 is the baseline. No code changed; it measures the code as it is."
    return md_text(result.hypothesis)


def _change(result: RoundResult, manifest: Manifest) -> str:
    if _is_baseline(result):
        at = manifest.base_commit or "the current checkout"
        return f"{NO_CHANGE}; the kernel is measured unmodified at {at} of {manifest.source}."
    return result.change


def _aggregates(result: RoundResult) -> str:
    score = result.score
    labels = [s.label for s in passing(score)]
    base = aggregate_over(result.baseline, labels)
    best = aggregate_over(result.best, labels) if result.best is not None else None
    scale = scale_for(score.metric, [score.aggregate, base, best])
    lines = [
        f"- Aggregate {scale.label(score.metric)} (geomean over {score.n_pass} PASS shapes, "
        f"{score.n_fail} FAIL): {scale.value(score.aggregate)}"
    ]
    if score.n_fail:
        lines.append("- A shape FAILed: the aggregate is 0 and the candidate is rejected.")
    if not _is_baseline(result):
        pct = fmt_pct(pct_change(score.aggregate, base))
        lines.append(
            f"- vs {RECORDED_BASELINE} (round-1's aggregate, measured at the baseline): "
            f"{scale.num(base)} -> {scale.value(score.aggregate)} ({pct})"
        )
    if result.best is not None and not _is_baseline(result):
        pct = fmt_pct(pct_change(score.aggregate, best))
        lines.append(
            f"- vs {INCUMBENT} (the current best's code, measured beside the candidate "
            f"in this round's pairs; what the gate judged): {scale.num(best)} -> "
            f"{scale.value(score.aggregate)} ({pct})"
        )
    if len(labels) < len(result.baseline.shapes):
        lines.append("- Comparisons use the baseline/best restricted to this round's PASS shapes.")
    return "\n".join(lines)


def _results(result: RoundResult) -> str:
    artifacts = "\n".join(f"  - `{a}`" for a in result.artifacts) or "  - none recorded"
    head = "\n".join(
        [
            f"- Validation time: {result.started} → {result.finished}",
            f"- Level: {result.level}",
            f"- Test command: `{result.test_command}`",
            f"- Benchmark command: `{result.benchmark_command}`",
            f"- Raw artifacts:\n{artifacts}",
        ]
    )
    table = shape_table(result.score, None if _is_baseline(result) else result.best)
    return f"{head}\n\n{table}\n\n{_aggregates(result)}"


def _gate_line(result: RoundResult) -> str | None:
    g = result.gate
    if g is None:
        return None
    if vetoed_unmeasured(result):
        return f"Gate {g.decision.value}: vetoed before measuring, nothing was measured"
    scale = scale_for(g.metric, [g.best_aggregate, g.candidate_aggregate])
    parts = [
        f"Gate {g.decision.value} on {scale.label(g.metric)}: "
        f"best {scale.value(g.best_aggregate)} -> "
        f"candidate {scale.value(g.candidate_aggregate)} ({fmt_gain(g.delta_pct, g)})"
    ]
    if g.threshold_pct is not None:
        parts.append(f"threshold {g.threshold_pct:.3f}%")
    if g.pairs_used:
        parts.append(f"{g.pairs_used} interleaved pair(s) judged by the near-noise rule")
    return ", ".join(parts) + "."


def _evidence(result: RoundResult) -> str | None:
    """The paired evidence the gate judged: per gating shape the paired mean with its
    95% interval and the pairs, and the round's measured noise."""
    ev = result.gate.evidence if result.gate else None
    if ev is None:
        return None

    def cell(e: Interval) -> str:
        half = e.half_width_pct
        return (
            f"{e.mean_pct:+.2f}% \u00b1 {half:.2f}%" if half is not None else f"{e.mean_pct:+.2f}%"
        )

    rows = [f"| {lb} | {cell(e)} | {e.pairs} |" for lb, e in ev.shapes.items()]
    spread = ev.gain.spread_pct
    noise = f"{spread:.2f}% a pair" if spread is not None else "unknown (one pair)"
    return "\n".join(
        [
            "Paired evidence (candidate / incumbent, each pair a fresh process pair; "
            "95% interval):",
            "",
            "| shape | paired change | pairs |",
            "|---|---|---|",
            *rows,
            f"| **all (geomean)** | {cell(ev.gain)} | {ev.gain.pairs} |",
            "",
            f"Measured noise: stdev {noise}; {ev.gain.pairs} pair(s) measured; at this noise "
            f"the near-noise rule wants re-measurements of {ev.remeasure_size} "
            "pair(s) each (docs/measurement.md §4.2).",
        ]
    )


def _decision(result: RoundResult) -> str:
    if _is_baseline(result):
        return (
            f"**BASELINE**. {NO_CHANGE}; every later round is judged against the current "
            "best, starting from these numbers."
        )
    lines = [f"**{result.status.value}**", ""]
    lines += [f"- {r}" for r in decision_reasons(result)] or ["- no reason recorded"]
    noisy = inconclusive(result.gate)
    if noisy is not None:
        lines.append(f"- **Too noisy to tell**: {noisy.line()}; {advice(result.round)}")
    extra = [x for x in (_gate_line(result), tradeoff_note(result)) if x]
    lines += [f"- {x}" for x in extra]
    evidence = _evidence(result)
    if evidence:
        lines += ["", evidence]
    return "\n".join(lines)


def _rollback(result: RoundResult) -> str | None:
    if result.status != Status.ROLLED_BACK and result.rollback is None:
        return None
    rb = result.rollback
    missing = "not recorded; add it with a correction before the next round"
    fields = [
        ("Change", rb.change if rb else missing),
        ("Expected", rb.expected if rb else missing),
        ("Actual", rb.actual if rb else missing),
        ("Root cause", rb.root_cause if rb else missing),
        ("Lesson", rb.lesson if rb else missing),
    ]
    return "\n".join(f"- {k}: {v or DASH}" for k, v in fields)


def _transfer(result: RoundResult) -> str:
    t: TransferCheck = result.transfer
    if _is_baseline(result):
        na = "n/a (baseline: no code changed)"
        fields = [
            ("Bucket", na),
            ("Cache key", na),
            ("id() audit", na),
            ("8-step hit-rate trace", na),
            ("Skew robustness", na),
            ("Benchmark gain", na),
            ("Estimated real-training gain", na),
            ("Decision", "n/a (BASELINE)"),
        ]
    else:
        gain = t.benchmark_gain_pct
        if gain is None and result.gate is not None:
            gain = result.gate.delta_pct
        fields = [
            ("Bucket", t.bucket),
            ("Cache key", t.cache_key),
            ("id() audit", t.id_audit),
            ("8-step hit-rate trace", t.hit_rate_trace),
            ("Skew robustness", t.skew_robustness),
            ("Benchmark gain", fmt_pct(gain)),
            ("Estimated real-training gain", fmt_pct(t.estimated_real_gain_pct)),
            ("Decision", _transfer_decision(result)),
        ]
    return "\n".join(f"- {k}: {v}" for k, v in fields)


def _transfer_decision(result: RoundResult) -> str:
    """The transfer check's decision; a round that kept nothing has no gain to carry into
    training, so an "ACCEPT-as-real" there is said as what it means."""
    decision = result.transfer.decision
    if result.status is Status.ACCEPTED or decision != "ACCEPT-as-real":
        return decision
    return (
        f"n/a ({result.status.value}: nothing was kept, so no gain carries into training; "
        "the audit found no over-fitting in the change)"
    )


def _tournament(result: RoundResult) -> str | None:
    """A tournament round's siblings, which won and why, and what to retry (None: a
    single round)."""
    t = result.tournament
    if t is None:
        return None
    lines = [
        f"- Judged with rounds {t.first}-{t.last} against one incumbent in one paired "
        "measurement (docs/protocol.md §1.5); each round is its own hypothesis and change.",
        f"- {t.line}",
    ]
    if t.retry:
        rounds = ", ".join(f"round-{n}" for n in t.retry)
        lines.append(
            f"- Superseded (accepted against the old head, but round-{t.winner} gained more): "
            f"{rounds}; retry them on the new head, each as a new round"
        )
    return "\n".join(lines)


def render_summary(result: RoundResult, manifest: Manifest) -> str:
    """The whole summary.md of one round."""
    bodies: dict[str, str | None] = {
        "Hypothesis": _hypothesis(result),
        "Single change": _change(result, manifest),
        "Results": _results(result),
        "Decision": _decision(result),
        "Tournament": _tournament(result),
        "Kernel facts": facts_markdown(result.kernel_facts),
        "Where the time went": _time_went(result),
        "Attribution": "n/a (baseline)" if _is_baseline(result) else result.attribution,
        "Next direction": result.next_direction,
        "Rollback Analysis": _rollback(result),
        "Real-training transfer check": _transfer(result),
    }
    title = f"# Round {result.round} — {result.status.value}\n"
    sections = [_section(k, v) for k, v in bodies.items() if v is not None]
    return "\n".join([title, *sections])


def _time_went(result: RoundResult) -> str | None:
    """The three steps that took the most wall time (``result.step_times``; a step's
    repeats together, and a step beside another counted in full: they overlap), as of
    the records' start; None for a result without them."""
    times = result.step_times
    if times is None or not times.steps:
        return None
    wall = times.wall_s
    lines = [f"{wall:.1f} s from the round's start to its records; the largest steps:", ""]
    for name, seconds in times.largest(3):
        share = f" ({100 * seconds / wall:.0f}%)" if wall > 0 else ""
        beside = {s.beside for s in times.steps if s.name == name} - {""}
        where = f", beside {', '.join(sorted(beside))}" if beside else ""
        lines.append(f"* {name}: {seconds:.1f} s{share}{where}")
    lines.append("")
    lines.append("Every step with its start and end: `step_times` in result.json.")
    return "\n".join(lines)


def commit_message(m: Manifest, n: int, hypothesis: str, gate: GateResult) -> str:
    """docs/protocol.md §6.7: the lineage commit message of an accepted round, the op
    spelled as upstream's loop spells ``target_op`` (``gemm_fp8_blockwise``)."""
    summary = hypothesis.strip().splitlines()[0][:72]
    scale = scale_for(gate.metric, [gate.best_aggregate, gate.candidate_aggregate])
    change = (
        f"geomean {scale.num(gate.best_aggregate)} -> {scale.value(gate.candidate_aggregate)} "
        f"({gate.delta_pct:+.1f}%)"
    )
    return (
        f"[optimize] {m.upstream_op} {m.target_backend} round-{n}: {summary}\n\n"
        f"Hypothesis: {hypothesis.strip()}\n"
        f"Result: {change}\n"
        f"Details: {Path(m.quick_command.split()[-1]).parent / 'logs' / 'optimize.md'}\n"
    )
