"""The verdict of ``campaign reproduce`` and its markdown report (pure: no I/O except
``write_report``).

The measured gain is G_meas = geomean_s(round N) / geomean_s(baseline) over the
round's shapes, paired here (A B B A turns of live workers locally, B C C B passes of
fresh processes in containers and on Slurm).  The recorded gain is
G_rec = the product of the paired gate ratios (candidate/incumbent geomean) of the
accepted rounds up to N, times round N's own ratio when N was not accepted (its
candidate was measured against the incumbent of its time); round-1 records 1.

Confidence interval.  One pass's log geomean has standard deviation sigma_G (the
campaign's calibration), so a pair's ln G_i has sqrt(2)*sigma_G and a mean over p
pairs sqrt(2/p)*sigma_G.  The difference D = ln G_meas - ln G_rec therefore has
standard deviation sigma_D = sigma_G * sqrt(2/p_meas + sum_k 2/p_k) (k: the recorded
rounds in the chain, p_k their pairs), and REPRODUCED needs |D| <= 1.96 * sigma_D
(95%) or |G_meas - G_rec| <= the tolerance max(TOL points, 3 sigma_G).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.files import write_atomic
from runner.core.outcomes import Score
from runner.store.fingerprint import FingerprintDiff

Z_95 = 1.96


@dataclass(frozen=True)
class Chain:
    """The recorded gain of round N vs the baseline and what it rests on."""

    ratio: float
    rounds: tuple[int, ...]
    pairs: tuple[int, ...]


@dataclass(frozen=True)
class Measured:
    """What was measured here: both merged scores and the paired per-pair gains."""

    baseline: Score
    candidate: Score
    pair_ratios: tuple[float, ...]
    sigma_here: float | None

    @property
    def failed(self) -> list[str]:
        return [
            s.label for s in (*self.baseline.shapes, *self.candidate.shapes) if s.check != "PASS"
        ]

    @property
    def ratio(self) -> float:
        if self.failed or self.baseline.aggregate <= 0:
            return 0.0
        return self.candidate.aggregate / self.baseline.aggregate


@dataclass(frozen=True)
class Verdict:
    reproduced: bool
    measured: float
    recorded: float
    sigma_d: float
    half_width: float
    tolerance: float
    reasons: tuple[str, ...]


@dataclass
class EnvCheck:
    """Environment comparison: recipe differences and fingerprint differences."""

    recipe_notes: list[str] = field(default_factory=list)
    diffs: list[FingerprintDiff] = field(default_factory=list)
    recorded_from: str = ""
    override: str | None = None

    @property
    def blocking(self) -> list[FingerprintDiff]:
        return [d for d in self.diffs if d.perf_relevant]

    @property
    def comparable(self) -> bool:
        return bool(self.recorded_from) and not self.blocking


def judge(chain: Chain, measured: Measured, sigma_g: float, tolerance_pct: float) -> Verdict:
    """REPRODUCED when G_meas is inside the interval around G_rec or the tolerance."""
    g_meas, g_rec = measured.ratio, chain.ratio
    p_meas = max(len(measured.pair_ratios), 1)
    sigma_d = sigma_g * math.sqrt(2 / p_meas + sum(2 / p for p in chain.pairs if p > 0))
    half = Z_95 * sigma_d
    tol = max(tolerance_pct / 100, 3 * sigma_g)
    if measured.failed:
        why = f"Check FAIL here in {', '.join(sorted(set(measured.failed)))}: nothing to compare"
        return Verdict(False, g_meas, g_rec, sigma_d, half, tol, (why,))
    d = math.log(g_meas) - math.log(g_rec)
    in_ci = abs(d) <= half
    in_tol = abs(g_meas - g_rec) <= tol
    reasons = (
        f"|ln G_meas - ln G_rec| = {abs(d):.4f} {'<=' if in_ci else '>'} "
        f"1.96 * sigma_D = {half:.4f} ({'inside' if in_ci else 'outside'} the 95% interval)",
        f"|G_meas - G_rec| = {100 * abs(g_meas - g_rec):.2f} points "
        f"{'<=' if in_tol else '>'} tolerance {100 * tol:.2f} points",
    )
    return Verdict(in_ci or in_tol, g_meas, g_rec, sigma_d, half, tol, reasons)


# ---------------------------------------------------------------- markdown


@dataclass(frozen=True)
class ReportFacts:
    """Everything the report states besides the verdict."""

    bundle: str
    bundle_sha256: str
    campaign: str
    round: int
    round_status: str
    metric: str
    base_commit: str
    base_note: str
    source: str
    executor: str
    replay: tuple[str, ...]
    sigma_g: float
    tolerance_pct: float
    recorded_score: Score | None
    out_dir: str


def render(
    facts: ReportFacts, chain: Chain, measured: Measured, verdict: Verdict, env: EnvCheck
) -> str:
    word = "REPRODUCED" if verdict.reproduced else "NOT REPRODUCED"
    parts = [
        f"# Reproduction of {facts.campaign} round-{facts.round}: {word}\n",
        _summary(facts, verdict),
        _source(facts),
        _environment(env),
        _measurement(facts, measured),
        _comparison(facts, chain, measured, verdict),
        _absolute(facts, measured, env),
    ]
    return "\n".join(parts)


def _summary(facts: ReportFacts, v: Verdict) -> str:
    return (
        f"* Verdict: **{'REPRODUCED' if v.reproduced else 'NOT REPRODUCED'}**\n"
        f"* Gain vs baseline ({facts.metric}, geomean): measured here "
        f"{_gain(v.measured)}, recorded {_gain(v.recorded)}\n"
        f"* Round {facts.round} was recorded as {facts.round_status}\n"
        f"* Bundle: `{facts.bundle}` (sha256 `{facts.bundle_sha256}`), every checksum verified\n"
        f"* Work folder: `{facts.out_dir}`\n"
    )


def _source(facts: ReportFacts) -> str:
    lines = [
        "## Source and lineage replay\n",
        f"* Source repository: `{facts.source}`",
        f"* Base commit: `{facts.base_commit}` ({facts.base_note})",
        f"* Executor: {facts.executor}",
    ]
    lines += [f"* {r}" for r in facts.replay] or [
        "* no patches: round-N is the base commit (an A/A comparison: G_rec = 1)"
    ]
    return "\n".join(lines) + "\n"


def _environment(env: EnvCheck) -> str:
    lines = ["## Environment\n"]
    lines += [f"* recipe: {n}" for n in env.recipe_notes] or ["* recipe: matches"]
    if not env.recorded_from:
        lines.append("* no fingerprint was recorded: the environments cannot be compared")
    elif env.blocking:
        keys = ", ".join(d.key for d in env.blocking)
        lines.append(f"* **the environments differ** in performance-relevant keys: {keys}")
        lines += [f"  * `{d.key}`: recorded `{d.a}`, here `{d.b}`" for d in env.blocking]
    else:
        lines.append(f"* fingerprint matches {env.recorded_from} in every performance-relevant key")
    other = [d.key for d in env.diffs if not d.perf_relevant]
    if other:
        lines.append(f"* other differences (not performance-relevant): {', '.join(other)}")
    if env.override:
        lines.append(f"* --allow-env-mismatch: {env.override}")
    return "\n".join(lines) + "\n"


def _measurement(facts: ReportFacts, m: Measured) -> str:
    rows = ["| shape | baseline | round-N | ratio |", "|---|---|---|---|"]
    cand = m.candidate.by_label()
    for s in m.baseline.shapes:
        c = cand.get(s.label)
        ratio = c.value / s.value if c and c.value and s.value else None
        rows.append(
            f"| {s.label} | {_num(s.value)} | {_num(c.value if c else None)} | {_num(ratio)} |"
        )
    pairs = ", ".join(f"{r:.4f}" for r in m.pair_ratios) or "none"
    here = f"{100 * m.sigma_here:.3f}%" if m.sigma_here is not None else "n/a"
    return (
        "## Measurement here (paired: A B B A turns of live workers locally, B C C B "
        "passes of fresh processes in containers and on Slurm)\n\n"
        + "\n".join(rows)
        + f"\n\n* per-pair geomean ratios G_i: {pairs}\n"
        f"* sigma_G of the baseline passes here: {here} (recorded: {100 * facts.sigma_g:.3f}%)\n"
    )


def _comparison(facts: ReportFacts, chain: Chain, m: Measured, v: Verdict) -> str:
    pairs = " + ".join(f"2/{p}" for p in chain.pairs) or "0"
    rounds = ", ".join(f"round-{r}" for r in chain.rounds) or "none (round-1: G_rec = 1)"
    return (
        "## Comparison with the record\n\n"
        f"* G_rec = {v.recorded:.4f}: product of the paired gate ratios of {rounds}\n"
        f"* G_meas = {v.measured:.4f} over {len(m.pair_ratios)} pairs\n"
        "* interval: sigma_D = sigma_G * sqrt(2/p_meas + sum_k 2/p_k) = "
        f"{facts.sigma_g:.5f} * sqrt(2/{max(len(m.pair_ratios), 1)} + {pairs}) = "
        f"{v.sigma_d:.5f}; inside when |ln G_meas - ln G_rec| <= 1.96 sigma_D = "
        f"{v.half_width:.5f} (95%). A pass's log geomean varies by sigma_G, a pair's "
        "difference by sqrt(2) sigma_G, a mean over p pairs by sqrt(2/p) sigma_G; the "
        "recorded and measured estimates are independent, so their variances add.\n"
        f"* tolerance: max({facts.tolerance_pct:g} points, 3 sigma_G) = "
        f"{100 * v.tolerance:.2f} points\n" + "".join(f"* {r}\n" for r in v.reasons)
    )


def _absolute(facts: ReportFacts, m: Measured, env: EnvCheck) -> str:
    head = "## Absolute figures\n\n"
    rec = facts.recorded_score
    if rec is None:
        return head + "* no recorded score for this round\n"
    if not env.comparable and not env.override:
        why = (
            "no fingerprint was recorded"
            if not env.recorded_from
            else "the environments differ in " + ", ".join(d.key for d in env.blocking)
        )
        return head + f"* not comparable: {why}; only the gain ratio above is compared\n"
    note = " (compared despite differences: --allow-env-mismatch)" if env.blocking else ""
    delta = m.candidate.aggregate / rec.aggregate - 1 if rec.aggregate > 0 else math.nan
    return head + (
        f"* round-{facts.round} {facts.metric} geomean: recorded {_num(rec.aggregate)}, "
        f"here {_num(m.candidate.aggregate)} ({100 * delta:+.2f}%){note}\n"
    )


def _gain(ratio: float) -> str:
    return f"{ratio:.4f} ({100 * (ratio - 1):+.2f}%)"


def _num(value: float | None, digits: int = 4) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def write_report(out: Path, text: str) -> Path:
    path = out / "reproduction.md"
    write_atomic(path, text)
    return path


def chain_for(rounds: Sequence[tuple[int, str, float | None, int]], n: int) -> Chain:
    """From (round, status, ratio_vs_incumbent, pairs) rows: the recorded gain of
    round ``n`` vs the baseline (see the module docstring)."""
    used = [r for r in rounds if r[0] <= n and r[1] == "ACCEPTED" and r[0] != 1]
    own = [r for r in rounds if r[0] == n and r[1] != "ACCEPTED" and r[0] != 1]
    chosen = [*used, *own]
    missing = [r[0] for r in chosen if r[2] is None]
    ratio = math.prod(r[2] for r in chosen if r[2] is not None)
    if missing:
        raise ValueError(f"round(s) {missing} recorded no paired ratio")
    return Chain(ratio, tuple(r[0] for r in chosen), tuple(r[3] for r in chosen))
