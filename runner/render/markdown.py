"""Renderers for the two append-only logs (docs/protocol.md §6.2-6.3) and the tables
shared with ``summary.md``; every figure is written by ``runner.render.figures``.

``logs/performance_trend.md``: one table, one row per round.  Avg = geomean over the
round's PASS shapes, Peak = the largest per-shape value, in the header's unit
with at least 3 significant digits (the other tables pick a unit for their size).  ``vs Baseline``
compares with round-1 restricted to the round's PASS shapes (a quick round measures
only the representative shapes; comparing its geomean with the geomean over all
baseline shapes would compare different shape sets).  Combined Step TFLOPS is the
round's primary aggregate for a Combined-Step campaign and Fwd Avg otherwise (no
backward path, or a forward-only metric).

Memory-bound campaigns (primary metric ``Forward GB/s``) keep the header unchanged:
the Fwd/Bwd columns hold GB/s, the Combined column holds Fwd Avg (GB/s), and the Key
Finding cell starts with ``(GB/s)`` so that a reader knows the unit.

``logs/optimize.md``: a title at init; at round-1 the basic information and the
baseline table; then one history entry per round; ``render_current_best``,
``render_directions`` and ``render_termination_check`` serve ``campaign report``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tabulate import tabulate

from runner.core.csv_schema import COMBINED_STEP
from runner.core.outcomes import RoundResult, Score, ShapeScore, Status
from runner.core.stats import geomean
from runner.render.escape import md_text
from runner.render.figures import (
    DASH,
    fmt_num,
    fmt_pct,
    scale_for,
    score_scale,
    unit_of,
    valid,
)
from runner.store.log_format import BASELINE_MARKER, history_marker
from runner.store.manifest import (
    PEAK_SHARE,
    Manifest,
    branch_name,
    parse_performance_target,
)

# What a round's figures are compared with, named as what they are: the incumbent (the
# current best's code) measured beside the candidate in the round's own pairs, which the
# gate judged; and round-1's aggregate as recorded at the baseline.  The "current best"
# of `campaign status` is the best round's recorded aggregate: another measurement.
INCUMBENT = "the incumbent in this round"
RECORDED_BASELINE = "the recorded baseline"


# -- formatting (the figures themselves: runner.render.figures) --------------------
def pct_change(new: float | None, old: float | None) -> float | None:
    if new is None or old is None or not valid(new) or not valid(old) or old <= 0:
        return None
    return (new / old - 1.0) * 100.0


def cell(text: str) -> str:
    """A markdown table cell: pipes escaped, newlines folded, never empty."""
    flat = " ".join(text.replace("|", "\\|").split())
    return flat or DASH


def md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    return tabulate(
        [[cell(c) for c in r] for r in rows],
        headers=list(headers),
        tablefmt="github",
        disable_numparse=True,
    )


def passing(score: Score, labels: Iterable[str] | None = None) -> list[ShapeScore]:
    keep = None if labels is None else set(labels)
    return [s for s in score.shapes if s.check == "PASS" and (keep is None or s.label in keep)]


def aggregate_over(score: Score, labels: Iterable[str] | None = None) -> float | None:
    """Geomean of the primary metric over PASS shapes (restricted to ``labels``)."""
    vals = [s.value for s in passing(score, labels) if s.value is not None and valid(s.value)]
    return geomean(vals) if vals else None


def decision_reasons(result: RoundResult) -> list[str]:
    reasons = list(result.reasons)
    if result.gate is not None:
        reasons += [r for r in result.gate.reasons if r not in reasons]
    return reasons


def tradeoff_note(result: RoundResult) -> str | None:
    """Names each regressed shape and by how much (None when none regressed)."""
    gate = result.gate
    if gate is None or not gate.regressed:
        return None
    deltas = {d.label: d.delta_pct for d in gate.shapes}
    parts = [f"{label} ({fmt_pct(deltas.get(label))})" for label in gate.regressed]
    if result.status == Status.ACCEPTED:
        return "trade-off: accepted although these shapes regressed (each by less than 5%): " + (
            ", ".join(parts)
        )
    return "regressed shapes: " + ", ".join(parts)


# -- performance_trend.md ---------------------------------------------------------
@dataclass(frozen=True)
class TrendFigures:
    fwd_avg: float | None
    fwd_peak: float | None
    bwd_avg: float | None
    bwd_peak: float | None
    step: float | None

    @property
    def has_backward(self) -> bool:
        return self.bwd_avg is not None


def trend_figures(
    score: Score, labels: Iterable[str] | None = None, *, official: bool = True
) -> TrendFigures:
    """Avg/Peak over PASS shapes; ``official`` uses the score's aggregate as step."""
    shapes = passing(score, labels)
    fwd = [s.forward for s in shapes if s.forward is not None and valid(s.forward)]
    bwd = [s.backward for s in shapes if s.backward is not None and valid(s.backward)]
    fwd_avg = geomean(fwd) if fwd else None
    step = fwd_avg
    if score.metric == COMBINED_STEP and bwd:
        step = score.aggregate if official else aggregate_over(score, labels)
    return TrendFigures(
        fwd_avg=fwd_avg,
        fwd_peak=max(fwd) if fwd else None,
        bwd_avg=geomean(bwd) if bwd else None,
        bwd_peak=max(bwd) if bwd else None,
        step=step,
    )


def vs_baseline(result: RoundResult, now: TrendFigures) -> str:
    if result.status == Status.BASELINE or result.round == 1:
        return DASH
    labels = [s.label for s in passing(result.score)]
    base = trend_figures(result.baseline, labels, official=False)
    step = fmt_pct(pct_change(now.step, base.step))
    fwd = fmt_pct(pct_change(now.fwd_avg, base.fwd_avg))
    if not (now.has_backward and base.has_backward):
        return f"step {step}, fwd {fwd}, bwd {DASH}"
    return f"step {step}, fwd {fwd}, bwd {fmt_pct(pct_change(now.bwd_avg, base.bwd_avg))}"


def render_trend_row(result: RoundResult) -> str:
    """One row of performance_trend.md (with the trailing newline)."""
    f = trend_figures(result.score)
    bwd = [fmt_num(f.bwd_avg), fmt_num(f.bwd_peak)] if f.has_backward else ["-", "-"]
    finding = result.key_finding
    if unit_of(result.score.metric) == "GB/s":
        finding = f"(GB/s) {finding}".strip()
    cells = [
        f"round-{result.round}",
        result.status.value,
        cell(result.description),
        fmt_num(f.fwd_avg),
        fmt_num(f.fwd_peak),
        *bwd,
        fmt_num(f.step),
        vs_baseline(result, f),
        cell(finding),
    ]
    return md_row(cells) + "\n"


# -- optimize.md --------------------------------------------------------------------
def shape_table(score: Score, best: Score | None = None, *, delta: bool = True) -> str:
    """Per shape: Check, Forward/Backward, the primary metric, delta vs the incumbent
    (``—`` without a best; the column is left out when ``delta`` is false), in one unit
    chosen for the size of the figures."""
    unit = unit_of(score.metric)
    diag = [f"Forward {unit}", f"Backward {unit}"]
    show_metric = score.metric not in diag
    scale = score_scale(score.metric, score)
    best_by = best.by_label() if best is not None else {}
    rows = []
    for s in score.shapes:
        ref = best_by.get(s.label)
        row = [s.label, s.check, scale.num(s.forward), scale.num(s.backward)]
        row += [scale.num(s.value)] if show_metric else []
        row += [latency_cell(s)]
        if delta:
            row.append(fmt_pct(pct_change(s.value, ref.value if ref else None)))
        row.append(f"{s.snr:.1f}" if s.snr is not None else "—")
        rows.append(row)
    metric = [scale.label(score.metric)] if show_metric else []
    headers = ["Shape", "Check", *(scale.label(d) for d in diag), *metric, "Latency fwd / bwd (ms)"]
    return md_table([*headers, *([f"Δ vs {INCUMBENT}"] if delta else []), "SNR (dB, worst)"], rows)


def latency_cell(s: ShapeScore | None) -> str:
    """Rule 4's per-shape latency: forward / backward milliseconds."""
    if s is None or s.forward_ms is None:
        return "—"
    bwd = f" / {s.backward_ms:.4g}" if s.backward_ms is not None else ""
    return f"{s.forward_ms:.4g}{bwd}"


def describe_heldout(m: Manifest) -> str:
    """What the logs and ``status`` say of the held-out shapes, never a sealed label."""
    if m.heldout_digest is not None:
        return (
            f"{m.heldout_count} sealed (labels hidden until `campaign accept`; digest "
            f"{str(m.heldout_digest)[:19]}...)"
        )
    if m.heldout_shapes:
        return ", ".join(m.heldout_shapes) + " (unsealed: listed in manifest.yaml)"
    return "none"


def _info_rows(m: Manifest) -> list[list[str]]:
    shapes = "all" if m.target_shapes == "all" else ", ".join(m.target_shapes)
    branch = branch_name(m) or "none (no branch)"
    return [
        ["Campaign", m.campaign_name],
        ["Target", f"{m.target} at {m.source}"],
        ["Operator", m.target_op + (f" ({m.granularity})" if m.granularity else "")],
        ["Backend / language", f"{m.target_backend} / {m.target_lang}"],
        ["GPU", m.target_gpu],
        ["Execution mode", m.execution_mode],
        ["Primary metric", m.primary_metric],
        ["Performance target", m.performance_target or "none"],
        ["Target shapes", f"{shapes} (shape set {m.shape_set})"],
        ["Representative shapes", ", ".join(m.representative_shapes) or "not chosen yet"],
        ["Held-out shapes", describe_heldout(m)],
        ["Kernel source", ", ".join(m.kernel_source) or "not recorded"],
        ["Test command", f"`{m.test_command}`"],
        ["Benchmark command", f"`{m.benchmark_command}`"],
        ["Quick command", f"`{m.quick_command}`"],
        ["Git", f"commit each accepted round: {'yes' if m.git_commit else 'no'}; branch {branch}"],
        ["Base commit", m.base_commit or "not recorded"],
        ["Max iterations", str(m.max_iterations) if m.max_iterations else "none"],
        ["Cache mode", m.cache_mode],
        ["Created", m.created],
    ]


def render_optimize_header(manifest: Manifest, baseline: RoundResult) -> str:
    """Basic information and the baseline table, appended once at round-1."""
    score = baseline.score
    own = scale_for(score.metric, [score.aggregate])
    agg = (
        f"Aggregate {own.label(score.metric)} (geomean over {score.n_pass} PASS shapes): "
        f"{own.value(score.aggregate)}; {score.n_fail} FAIL"
    )
    return (
        f"\n{BASELINE_MARKER}\n\n{md_table(['Field', 'Value'], _info_rows(manifest))}\n\n"
        f"## Baseline (round-{baseline.round}, {baseline.level} validation, "
        f"{baseline.finished})\n\n{shape_table(score, delta=False)}\n\n{agg}\n\n## History\n"
    )


# How a veto of a failed focused test starts (``runner.flow.validate``, the tournament's).
TEST_FAILED = "focused test failed"


def vetoed_unmeasured(result: RoundResult) -> bool:
    """A VALIDATE round vetoed before anything was measured (its gate has no shapes)."""
    return result.gate is not None and not result.gate.shapes and result.best is not None


def test_failed(result: RoundResult) -> bool:
    """The round's focused test failed on the candidate (a veto says so)."""
    said = [*result.reasons, *(result.gate.reasons if result.gate else ())]
    return any(r.startswith(TEST_FAILED) for r in said)


def result_line(result: RoundResult) -> str:
    score = result.score
    if vetoed_unmeasured(result):
        return "not measured: vetoed before measuring (see Decision)"
    if result.best is None or result.status == Status.BASELINE:
        own = scale_for(score.metric, [score.aggregate])
        return (
            f"{own.label(score.metric)} geomean {own.value(score.aggregate)} over "
            f"{score.n_pass} PASS shapes, {score.n_fail} FAIL"
        )
    labels = [s.label for s in passing(score)]
    best = aggregate_over(result.best, labels)
    base = aggregate_over(result.baseline, labels)
    scale = scale_for(score.metric, [best, score.aggregate])
    return (
        f"{scale.label(score.metric)} geomean {scale.num(best)} -> {scale.value(score.aggregate)} "
        f"({fmt_pct(pct_change(score.aggregate, best))} vs {INCUMBENT}, "
        f"{fmt_pct(pct_change(score.aggregate, base))} vs {RECORDED_BASELINE})"
    )


def _test_line(result: RoundResult) -> str:
    if test_failed(result):
        return f"`{result.test_command}` — failed on the candidate; see Decision"
    ok = result.gate is not None or result.status in (Status.BASELINE, Status.ACCEPTED)
    return f"`{result.test_command}` — " + ("passed" if ok else "not passed; see Decision")


def render_history_entry(result: RoundResult) -> str:
    """One history entry of optimize.md (starts with a blank line)."""
    n = result.round
    reasons = decision_reasons(result)
    decision = result.status.value + (": " + "; ".join(reasons) if reasons else "")
    notes = [x for x in (result.key_finding, tradeoff_note(result)) if x]
    if result.commit:
        notes.append(f"commit {result.commit}")
    baseline = n == 1 or result.status == Status.BASELINE
    change = "none (baseline: no code changed)" if baseline else result.change
    hypothesis = (
        "none (baseline: measures the unmodified code)" if baseline else md_text(result.hypothesis)
    )
    lines = [
        f"- Time: {result.started} → {result.finished}",
        f"- Level: {result.level}",
        f"- Hypothesis: {hypothesis or DASH}",
        f"- Changes: {change or DASH}",
        f"- Result: {result_line(result)}",
        f"- Test: {_test_line(result)}",
        f"- Decision: {decision}",
        f"- Details: [rounds/round-{n}/summary.md](../rounds/round-{n}/summary.md)",
        f"- Notes: {'; '.join(notes) or DASH}",
    ]
    body = "\n".join(" ".join(line.split("\n")) for line in lines)
    return f"\n{history_marker(n)}{result.status.value}\n\n{body}\n"


# -- Current Best and Directions: after every round, and in the report ------------------
@dataclass(frozen=True)
class Ineffective:
    """One row of upstream's Verified Ineffective Directions: the direction, the round
    that showed it, why it failed."""

    direction: str
    round: int
    reason: str


def render_current_best(baseline: Score, best: Score, best_round: int) -> str:
    """Upstream's ``## Current Best`` (the optimization log template of
    ``agent/skills/kernel-optimize/workflow/optimize-loop.md``, Primus-Turbo a6a16cdc):
    per shape the baseline, the current best and the improvement on the primary metric,
    then the aggregate line, over the shapes the best measured."""
    best_by = best.by_label()
    scale = score_scale(baseline.metric, baseline, best)
    rows = []
    for s in baseline.shapes:
        b = best_by.get(s.label)
        now = b.value if b is not None else None
        rows.append(
            [s.label, scale.num(s.value), scale.num(now), fmt_pct(pct_change(now, s.value))]
        )
    labels = [s.label for s in passing(best)]
    base_agg, best_agg = aggregate_over(baseline, labels), aggregate_over(best, labels)
    headers = ["Shape (MxNxK)", "Baseline", "Current Best", "Improvement"]
    return (
        f"\n## Current Best\n{md_table(headers, rows)}\n"
        f"- Aggregate score: baseline {scale.num(base_agg)} → current {scale.num(best_agg)} "
        f"({fmt_pct(pct_change(best_agg, base_agg))})\n"
        f"- Current best: round-{best_round}; {scale.label(baseline.metric)}, geomean over "
        f"{len(labels)} shape(s)\n"
    )


def render_directions(to_try: Sequence[str], ineffective: Sequence[Ineffective]) -> str:
    """Upstream's ``## Directions to Try`` (open directions unchecked, the verified
    ineffective ones checked and struck through with their round) and ``## Verified
    Ineffective Directions`` (direction, version, failure reason), as the optimization
    log template of optimize-loop.md writes them (Primus-Turbo a6a16cdc); the user's
    words go through ``runner.render.escape.md_text``."""
    items = [f"- [ ] {md_text(x)}" for x in to_try]
    items += [
        f"- [x] ~~{md_text(x.direction)}~~ (verified in round-{x.round})" for x in ineffective
    ]
    rows = [[md_text(x.direction), f"round-{x.round}", md_text(x.reason)] for x in ineffective]
    table = md_table(["Direction", "Version", "Failure Reason"], rows) if rows else "- none yet"
    listed = "\n".join(items) or "- none recorded"
    return f"\n## Directions to Try\n{listed}\n\n## Verified Ineffective Directions\n{table}\n"


def _best(results: Sequence[RoundResult]) -> RoundResult | None:
    kept = [r for r in results if r.status in (Status.BASELINE, Status.ACCEPTED)]
    return max(kept, key=lambda r: r.round) if kept else None


def _t1(
    manifest: Manifest, best: RoundResult | None, peak_fraction: float | None
) -> tuple[bool, str]:
    """T1; a target given as a share of peak (``80% of peak``) reads the same fraction
    of the hardware peak that T2 reads."""
    target = manifest.performance_target
    if target is None:
        return False, "T1 performance target: not set"
    op, goal, unit = parse_performance_target(target)
    if best is None:
        return False, f"T1 performance target ({target}): NOT MET (no best)"
    if unit == PEAK_SHARE:
        if peak_fraction is None:
            return False, f"T1 performance target ({target}): unknown (no peak figure)"
        value, shown = peak_fraction * 100, f"{peak_fraction * 100:.1f}% of peak"
    else:
        value = best.score.aggregate
        shown = f"{fmt_num(value)} {unit} (round-{best.round})"
    met = value >= goal if op == ">=" else value > goal
    verdict = "MET" if met else "NOT MET"
    return met, f"T1 performance target ({target}): {verdict} — best {shown}"


def _t2(peak_fraction: float | None, goal: float) -> tuple[bool, str]:
    if peak_fraction is None:
        return False, "T2 fraction of hardware peak: unknown (no peak figure for this GPU/dtype)"
    met = peak_fraction >= goal
    return met, (
        f"T2 fraction of hardware peak: {'MET' if met else 'NOT MET'} — "
        f"{peak_fraction * 100:.1f}% of peak (acceptable: {goal * 100:.1f}%)"
    )


def _t3(manifest: Manifest, results: Sequence[RoundResult]) -> tuple[bool, str]:
    used = sum(1 for r in results if r.round >= 2)
    if manifest.max_iterations is None:
        return False, f"T3 max_iterations: not set ({used} attempt rounds so far)"
    met = used >= manifest.max_iterations
    return met, (
        f"T3 max_iterations: {'MET' if met else 'NOT MET'} — {used} of "
        f"{manifest.max_iterations} attempt rounds used"
    )


def termination_checks(
    manifest: Manifest,
    results: Sequence[RoundResult],
    *,
    peak_fraction: float | None = None,
    peak_goal: float = 0.8,
    user_stop: bool = False,
) -> list[tuple[bool, str]]:
    """T1-T4 (docs/protocol.md §7.2), each (met, its line with the figures)."""
    return [
        _t1(manifest, _best(results), peak_fraction),
        _t2(peak_fraction, peak_goal),
        _t3(manifest, results),
        (user_stop, f"T4 user asked to stop: {'YES' if user_stop else 'no'}"),
    ]


def render_termination_check(
    manifest: Manifest,
    results: Sequence[RoundResult],
    *,
    peak_fraction: float | None = None,
    peak_goal: float = 0.8,
    user_stop: bool = False,
) -> str:
    """The Termination Check block (docs/protocol.md §7.2): T1-T4 and the verdict."""
    checks = termination_checks(
        manifest, results, peak_fraction=peak_fraction, peak_goal=peak_goal, user_stop=user_stop
    )
    held = [f"T{i}" for i, (ok, _) in enumerate(checks, 1) if ok]
    verdict = (
        f"the campaign may end ({', '.join(held)} holds)"
        if held
        else "the campaign may NOT end yet: none of T1-T4 holds"
    )
    lines = "\n".join(f"- {text}" for _, text in checks)
    return f"\n## Termination Check\n\n{lines}\n- Verdict: {verdict}\n"


def render_final_sections(
    manifest: Manifest,
    results: Sequence[RoundResult],
    *,
    to_try: Sequence[str] = (),
    ineffective: Sequence[Ineffective] = (),
    peak_fraction: float | None = None,
    user_stop: bool = False,
) -> str:
    """Current best vs baseline, directions, and the Termination Check, for the end of
    optimize.md (``campaign report`` adds the Final Report after them)."""
    best = _best(results)
    parts = []
    if best is not None:
        parts.append(render_current_best(best.baseline, best.score, best.round))
    parts.append(render_directions(to_try, ineffective))
    parts.append(
        render_termination_check(
            manifest, results, peak_fraction=peak_fraction, user_stop=user_stop
        )
    )
    return "".join(parts)


def render_trend_correction(n: int, note: str, when: str) -> str:
    """A correction of round-N's trend row, as a row, so the table stays one table."""
    cells = [f"round-{n} (correction)", "CORRECTION", cell(f"{when}: {note}")]
    return md_row([*cells, *["-"] * 7]) + "\n"
