"""The report block at the end of ``logs/optimize.md`` (written by ``campaign report``,
``runner.render.html_report``, together with the HTML page).

Appended to ``logs/optimize.md`` (through ``runner.store.appendlog``; a second report is a
second dated block, never a rewrite), docs/protocol.md §6.3 and §7.3: current best vs
baseline, the directions, the Termination Check (T1-T4) and the Final Report:
baseline vs final best on full validation (from ``campaign accept`` when it ran),
cumulative gain, effective and ineffective directions, the top three next steps,
links to the round summaries and the real-training audit (S_real / W_real / R_real).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runner.core.outcomes import GateResult, RoundResult, Score, Status
from runner.core.stats import geomean
from runner.judge.peaks import peak_for
from runner.ops.info import op_info
from runner.render.figures import fmt_gain, fmt_pct, pair_spread, score_scale, short_text
from runner.render.headline import compound, headline_gain, round_gain
from runner.render.markdown import (
    md_table,
    render_final_sections,
    render_termination_check,
)
from runner.render.status import best_round, consecutive_rollbacks, escalation_step
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest

INFLATION_LIMIT_PCT = 1.0
REAL_BUCKETS = ("K1", "K2", "K3", "K4")


# ---- the real-training audit (docs/protocol.md §8.5) -----------------------------------------
@dataclass(frozen=True)
class TransferRow:
    round: int
    bucket: str
    decision: str
    benchmark_gain_pct: float
    real_gain_pct: float
    share: str  # "S" | "W" | "R"


@dataclass(frozen=True)
class TransferSplit:
    rows: tuple[TransferRow, ...]
    headline_pct: float
    s_real_pct: float
    w_real_pct: float
    r_real_pct: float

    @property
    def real_pct(self) -> float:
        return compound([self.s_real_pct, self.w_real_pct])

    @property
    def gap_pct(self) -> float:
        """Headline benchmark gain minus the gain real training keeps (points)."""
        return self.headline_pct - self.real_pct

    @property
    def inflated(self) -> bool:
        return self.gap_pct > INFLATION_LIMIT_PCT


def transfer_row(r: RoundResult) -> TransferRow:
    """One accepted round's share: K1-K4 count 1:1 (S), W1 counts its estimated
    real-training gain (W), W2/W3 or REJECT-as-overfit count nothing (R)."""
    t, gain = r.transfer, round_gain(r)
    bucket = t.bucket.upper()
    if bucket in REAL_BUCKETS and t.decision != "REJECT-as-overfit":
        return TransferRow(r.round, bucket, t.decision, gain, gain, "S")
    if bucket == "W1" and t.decision != "REJECT-as-overfit":
        real = t.estimated_real_gain_pct if t.estimated_real_gain_pct is not None else gain
        return TransferRow(r.round, bucket, t.decision, gain, min(real, gain), "W")
    return TransferRow(r.round, bucket, t.decision, gain, 0.0, "R")


def transfer_split(results: Sequence[RoundResult]) -> TransferSplit:
    accepted = sorted((r for r in results if r.status is Status.ACCEPTED), key=lambda r: r.round)
    rows = tuple(transfer_row(r) for r in accepted)

    def share(kind: str) -> float:
        return compound([x.benchmark_gain_pct for x in rows if x.share == kind])

    w_real = compound([x.real_gain_pct for x in rows if x.share == "W"])
    return TransferSplit(
        rows=rows,
        headline_pct=headline_gain(results).pct,
        s_real_pct=share("S"),
        w_real_pct=w_real,
        r_real_pct=share("R"),
    )


def render_transfer(split: TransferSplit) -> str:
    table = md_table(
        ["Round", "Bucket", "Decision", "Benchmark gain", "Real-training gain", "Share"],
        [
            [
                f"round-{x.round}",
                x.bucket,
                x.decision,
                fmt_pct(x.benchmark_gain_pct),
                fmt_pct(x.real_gain_pct),
                f"{x.share}_real",
            ]
            for x in split.rows
        ],
    )
    lines = [
        f"- Headline gain (docs/protocol.md §7.4): {fmt_pct(split.headline_pct)}",
        f"- S_real (K1-K4, counted 1:1): {fmt_pct(split.s_real_pct)}",
        f"- W_real (W1 weight caches, capped at the estimated real gain): "
        f"{fmt_pct(split.w_real_pct)}",
        f"- R_real (W2/W3 or REJECT-as-overfit; must be 0): {fmt_pct(split.r_real_pct)}"
        + ("" if abs(split.r_real_pct) < 1e-9 else " — NOT ZERO: an over-fitted gain was accepted"),
        f"- Real-training gain (S_real with W_real): {fmt_pct(split.real_pct)}",
    ]
    gap = f"- Inflation gap (headline - real): {split.gap_pct:.3f} points"
    if split.inflated:
        gap += f" — ABOVE {INFLATION_LIMIT_PCT:g}%: the benchmark overstates the real gain"
    lines.append(gap)
    return (table + "\n\n" if split.rows else "No accepted round.\n\n") + "\n".join(lines)


# ---- directions and next steps -----------------------------------------------------------
DESCRIPTION_WIDTH = 80


def brief(r: RoundResult) -> str:
    """The round's description; when the record cut it from a longer hypothesis (at 80
    characters, mid-word), the hypothesis cut at a word boundary instead."""
    first = " ".join(r.hypothesis.strip().splitlines()[0].split()) if r.hypothesis.strip() else ""
    cut = r.description.strip()
    if cut and len(first) > len(cut) and first.startswith(" ".join(cut.split())):
        return short_text(first, DESCRIPTION_WIDTH)
    return r.description


def _delta(r: RoundResult) -> str:
    return f"{fmt_gain(r.gate.delta_pct, r.gate)} vs incumbent" if r.gate else "no gate verdict"


def effective_directions(results: Sequence[RoundResult]) -> list[str]:
    return [
        f"round-{r.round}: {brief(r)} ({_delta(r)})" for r in results if r.status is Status.ACCEPTED
    ]


def inconclusive(r: RoundResult) -> bool:
    """A rolled-back round whose paired gain's whole 95% interval lies above zero: a
    gain the gate could not accept at this noise, not a direction shown ineffective."""
    spread = pair_spread(r.gate) if r.gate is not None else None
    if r.gate is None or spread is None or r.status is not Status.ROLLED_BACK:
        return False
    return r.gate.delta_pct - spread[0] > 0


def ineffective_directions(results: Sequence[RoundResult]) -> list[str]:
    out = []
    for r in results:
        if inconclusive(r):
            out.append(
                f"round-{r.round}: {brief(r)} ({_delta(r)}): inconclusive, not shown "
                "ineffective: a gain above zero the gate could not accept at this noise; "
                "measure it again on a quieter machine or with more --pairs"
            )
        elif r.status is Status.ROLLED_BACK:
            lesson = f"; lesson: {r.rollback.lesson}" if r.rollback else ""
            out.append(f"round-{r.round}: {brief(r)} ({_delta(r)}){lesson}")
        elif r.status is Status.FAILED:
            out.append(f"round-{r.round}: {brief(r)} (not measured: the worker failed)")
    return out


def _weakest_shape(baseline: Score, best: Score) -> tuple[str, float] | None:
    base = baseline.by_label()
    gains = []
    for s in best.shapes:
        b = base.get(s.label)
        if s.value and b is not None and b.value:
            gains.append((s.label, (s.value / b.value - 1) * 100))
    return min(gains, key=lambda g: g[1]) if gains else None


def next_steps(
    results: Sequence[RoundResult], acceptance: dict[str, Any] | None, pair: tuple[Score, Score]
) -> list[str]:
    """The top three next steps, most urgent first."""
    steps = []
    accepted = any(r.status is Status.ACCEPTED for r in results)
    if acceptance is None and accepted:
        steps.append(
            "Run `campaign accept`: full validation of the final best on every target "
            "shape, the full benchmark, the full test suite and the branch check."
        )
    elif acceptance is not None and acceptance["outcome"] != "ACCEPTED":
        steps.append(
            "Fix what final acceptance found, then run `campaign accept` again: "
            + "; ".join(acceptance["reasons"])
        )
    esc = escalation_step(consecutive_rollbacks(results))
    if esc is not None:
        steps.append(f"Escalation step {esc[0]}: {esc[1]}.")
    best = best_round(results)
    if best is not None and best.status is Status.ACCEPTED and best.next_direction:
        steps.append(f"From round-{best.round}: {best.next_direction}.")
    weak = _weakest_shape(*pair) if any(r.status is Status.ACCEPTED for r in results) else None
    if weak is not None:
        steps.append(
            f"Profile shape {weak[0]}: it changed least ({fmt_pct(weak[1])} vs "
            "baseline); it bounds the aggregate."
        )
    steps.append("Re-profile the representative shapes and state the next single hypothesis.")
    return steps[:3]


# ---- scores the report compares ----------------------------------------------------------
def compared_scores(
    results: Sequence[RoundResult], acceptance: dict[str, Any] | None
) -> tuple[Score, Score, str]:
    """(baseline, final best, where they come from): full validation when accepted ran."""
    if acceptance and acceptance.get("baseline_score") and acceptance.get("final_score"):
        return (
            Score.from_dict(acceptance["baseline_score"]),
            Score.from_dict(acceptance["final_score"]),
            f"full validation by `campaign accept` ({acceptance['finished']})",
        )
    best = best_round(results)
    assert best is not None
    return (
        best.baseline,
        best.score,
        (
            f"round records (round-{best.round}, {best.level} validation); full validation has "
            "not been run: run `campaign accept`"
        ),
    )


def peak_info(m: Manifest) -> tuple[float | None, str]:
    """(peak for the primary metric on the campaign's GPU, the dtype looked up)."""
    dtype = "hbm" if "GB/s" in m.primary_metric else op_info(m.target_op).precision
    return peak_for(m.target_gpu, dtype), dtype


def peak_fraction(final: Score, peak: float | None) -> float | None:
    vals = [s.value / peak for s in final.shapes if s.value and peak]
    return geomean(vals) if vals else None


# ---- the markdown ------------------------------------------------------------------------
def _vs_table(baseline: Score, final: Score) -> str:
    fin = final.by_label()
    scale = score_scale(baseline.metric, baseline, final)
    rows = []
    for s in baseline.shapes:
        f = fin.get(s.label)
        fv = f.value if f else None
        change = fmt_pct((fv / s.value - 1) * 100) if fv and s.value else "—"
        rows.append([s.label, scale.num(s.value), scale.num(fv), change])
    labels = [s.label for s in final.shapes if s.value]
    b_agg = geomean([s.value for s in baseline.shapes if s.label in labels and s.value])
    f_agg = geomean([s.value for s in final.shapes if s.value])
    change = fmt_pct((f_agg / b_agg - 1) * 100 if b_agg else None)
    rows.append(["geomean", scale.num(b_agg), scale.num(f_agg), change])
    unit = f" ({scale.unit})"
    return md_table(["Shape", f"Baseline{unit}", f"Final best{unit}", "Change"], rows)


def _acceptance_line(acceptance: dict[str, Any] | None) -> str:
    if acceptance is None:
        return "Final acceptance: not run (`campaign accept`)."
    why = "; ".join(acceptance["reasons"]) or "every check passed"
    return (
        f"Final acceptance: **{acceptance['outcome']}** ({acceptance['finished']}): {why}. "
        "Details: [acceptance/acceptance.md](../acceptance/acceptance.md)"
    )


def _cumulative(
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    metric: str,
    best: RoundResult | None,
) -> str:
    """The headline gain; beside it, final acceptance's own paired measurement of the
    lineage head against the base commit when it ran (a measurement, not the headline)."""
    text = (
        f"Headline gain, {metric} geomean: {headline_gain(results).describe()}; final best: "
        f"round-{best.round if best else '-'}."
    )
    if acceptance and acceptance.get("gate"):
        gate = GateResult.from_dict(acceptance["gate"])
        text += (
            " Final acceptance measured the head against the base commit, paired: "
            f"{fmt_gain(gate.delta_pct, gate)} ({acceptance['finished']})."
        )
    return text


def _links(results: Sequence[RoundResult]) -> str:
    return "\n".join(
        f"- [rounds/round-{r.round}/summary.md](../rounds/round-{r.round}/summary.md) — "
        f"{r.status.value}: {brief(r)}"
        for r in results
    )


def _items(xs: Sequence[str]) -> str:
    return "\n".join(f"- {' '.join(x.split())}" for x in xs) or "- none recorded"


def render_final_report(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    when: str,
) -> str:
    baseline, final, source = compared_scores(results, acceptance)
    best = best_round(results)
    audit = render_transfer(transfer_split(results))
    steps = "\n".join(
        f"{i}. {s}" for i, s in enumerate(next_steps(results, acceptance, (baseline, final)), 1)
    )
    return (
        f"\n## Final Report ({when})\n\n"
        f"### Baseline vs final best\n\nSource: {source}.\n\n{_vs_table(baseline, final)}\n\n"
        f"{_acceptance_line(acceptance)}\n\n"
        f"### Cumulative gain\n\n{_cumulative(results, acceptance, baseline.metric, best)}\n\n"
        f"### Effective directions\n\n{_items(effective_directions(results))}\n\n"
        f"### Ineffective directions\n\n{_items(ineffective_directions(results))}\n\n"
        f"### Top three next steps\n\n{steps}\n\n"
        f"### Round summaries\n\n{_links(results)}\n\n"
        f"### Real-training audit (docs/protocol.md §8.5)\n\n{audit}\n\n"
        f"HTML report: [report/index.html](../report/index.html)\n"
    )


def render_report(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    *,
    when: str,
    user_stop: bool = False,
) -> str:
    """The whole report block: what `campaign report` writes to report/final_report.md."""
    m = campaign.manifest
    baseline, final, _ = compared_scores(results, acceptance)
    peak, _dtype = peak_info(m)
    fraction = peak_fraction(final, peak)
    head = render_final_sections(
        m,
        results,
        to_try=next_steps(results, acceptance, (baseline, final)),
        ineffective=ineffective_directions(results),
        peak_fraction=fraction,
        user_stop=user_stop,
    )
    final_report = render_final_report(campaign, results, acceptance, when)
    return f"\n---\n\n## Report of {when}\n{head}{final_report}"


def termination_text(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    user_stop: bool,
) -> str:
    _, final, _ = compared_scores(results, acceptance)
    peak, _ = peak_info(campaign.manifest)
    return render_termination_check(
        campaign.manifest, results, peak_fraction=peak_fraction(final, peak), user_stop=user_stop
    )
