"""The gate (docs/protocol.md §5, computed as in docs/measurement.md §4): a pure
function from the best and the candidate scores to a verdict.  No I/O.

Order of the rules, all on the primary metric (higher is better), d(s) = ln(cand/best):

1. a veto (build failure, focused-test failure, over-fit finding) -> ROLLED_BACK;
2. any candidate row FAIL -> ROLLED_BACK (its aggregate is 0);
3. G = exp(mean_s d(s)) = candidate geomean / best geomean; G <= 1 -> ROLLED_BACK
   (merely equal is not an improvement);
4. any shape with d(s) <= -ln(1.05) -> ROLLED_BACK, naming the shapes;
5. G - 1 >= T = max(2%, 3*sigma_G) -> ACCEPTED (ACCEPTED_TRADEOFF when some shape's
   d(s) < 0, each named with its percentage);
6. otherwise near noise: accept only if the re-measurements (runs of k fresh pairs,
   ``runner.judge.evidence``) have a mean gain m > 1% and a stdev s < m/2, at least 3
   of them, and no shape's paired mean is at or below -ln(1.05); otherwise ROLLED_BACK
   (noise).

How the rules meet noisy evidence (docs/measurement.md §4.2):

* without pairs (``campaign gate`` on two CSVs): the rules on the merged scores, and
  near noise NEEDS_REMEASURE;
* with fewer pairs than ``required_pairs``: only a reading beyond the threshold either
  way decides; anything else NEEDS_REMEASURE;
* with enough pairs: each rule decides on the paired evidence when its interval is
  clear (rule 3: the whole interval of the paired gain below +1%; rule 4: a shape's
  whole interval at or below -5%, and one straddling -5% asks for more pairs; rule 5:
  G - 1 >= T and the interval above 0) and otherwise NEEDS_REMEASURE with the fresh
  pairs it needs (``more_pairs``); with ``final`` (the round's cap is reached) the point
  estimates decide and what is still unclear is ROLLED_BACK as too volatile to tell.

Every verdict given pairs (whichever rule decided, an accept above the threshold before
the required pairs are in included) records them: each pair's gain
(``pair_gains_pct``) and the paired evidence (``evidence``: the paired gain and each
gating shape's paired mean with its 95% half-width and pairs; the half-width is None
with one pair).  A veto or a FAIL is decided before any statistics and records none.

Targeted-shape round (``targeted_shapes`` non-empty; docs/protocol.md §5.4): rules 3-6
are judged on the targeted shapes only (their geomean ratio and their per-shape regressions); shapes
outside the target that regressed by 5% or more are reported in ``reasons`` and listed
in ``regressed`` but do not reject; an acceptance with any regressed shape is
ACCEPTED_TRADEOFF.  ``delta_pct`` is the gain the verdict was judged on: the
(targeted) geomean ratio, or the mean paired gain m in the near-noise rule.

Sums of logarithms use ``math.fsum`` (exactly rounded, hence independent of shape
order), and ratios are taken before logarithms so that scaling every value of both
scores by one constant leaves each ratio unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from runner.core.errors import ConfigError
from runner.core.outcomes import (
    Decision,
    GateResult,
    Interval,
    PairedEvidence,
    PairSample,
    Score,
    ShapeDelta,
)
from runner.core.stats import stdev
from runner.judge.evidence import FLOOR_GAIN, MAX_REMEASURE_SIZE, Evidence, Z, gather, noise_rule
from runner.judge.gate_inputs import (
    check_pairs,
    check_same_labels,
    check_scores,
    check_sigma,
    positive,
    usable,
)

SEVERE_LOG = math.log(1.05)  # d <= -SEVERE_LOG: a shape regressed by 5% or more
MIN_THRESHOLD = 0.02  # the direct-accept floor, 2%
NOISE_MIN_GAIN = 0.01  # the paired rule needs a mean gain above 1%
VOLATILE_SIGMA = 0.01  # sigma_G above 1% -> at least 5 pairs
VOLATILE_PAIRS = 5


def accept_threshold(sigma_g: float | None) -> float:
    """T = max(2%, 3 sigma_G) as a fraction (docs/protocol.md §5.3)."""
    return max(MIN_THRESHOLD, 3 * (sigma_g or 0.0))


def required_pairs(sigma_g: float | None, min_pairs: int = 3) -> int:
    """The paired samples the near-noise rule needs: ``min_pairs``, at least
    VOLATILE_PAIRS when sigma_G is above VOLATILE_SIGMA.  The measuring side asks this
    (not a copy of the rule) how many independent pairs to have before it gates again."""
    if min_pairs < 1:
        raise ConfigError(f"min_pairs must be at least 1, got {min_pairs}")
    volatile = (sigma_g or 0.0) > VOLATILE_SIGMA
    return max(min_pairs, VOLATILE_PAIRS) if volatile else min_pairs


@dataclass(frozen=True)
class _Facts:
    """What every rule needs: the inputs, the per-shape log ratios and the threshold."""

    best: Score
    candidate: Score
    logs: dict[str, float]  # label -> ln(candidate / best)
    gating: tuple[str, ...]  # the labels the verdict is judged on
    threshold: float
    required_pairs: int

    @property
    def targeted(self) -> bool:
        return len(self.gating) < len(self.logs)


def decide(
    best: Score,
    candidate: Score,
    *,
    sigma_g: float | None = None,
    pairs: Sequence[PairSample] = (),
    vetoes: Sequence[str] = (),
    targeted_shapes: Sequence[str] = (),
    min_pairs: int = 3,
    final: bool = False,
) -> GateResult:
    """Judge ``candidate`` against ``best`` (see the module docstring for the rules).
    ``final``: no more pairs will come (the round's measurement cap is reached), so
    nothing may be NEEDS_REMEASURE: what is still unclear rolls back as too volatile.
    Raises ConfigError when the inputs cannot be compared (different shapes or metric,
    a best score with FAIL rows, malformed pairs or sigma)."""
    check_sigma(sigma_g)
    if min_pairs < 1:
        raise ConfigError(f"min_pairs must be at least 1, got {min_pairs}")
    if vetoes:
        return _veto(best, candidate, vetoes)
    check_scores(best, candidate)
    if candidate.n_fail:
        return _failed(best, candidate)
    facts = _facts(best, candidate, sigma_g, targeted_shapes, min_pairs)
    if not pairs:
        return _single(facts, _gain(facts))
    check_pairs(pairs, facts.logs)
    ev = gather(pairs, facts.gating)
    return _recorded(_judge(facts, ev, final), ev)


def _log_interval(est: Interval | None) -> tuple[float, float] | None:
    """The 95% interval of an evidence estimate (``mean_pct``, ``half_width_pct``) on
    the log scale the gate judges, low and high; None where it has none."""
    if est is None or est.half_width_pct is None or est.mean_pct <= -100:
        return None
    mean, half = est.mean_pct, est.half_width_pct
    centre = math.log1p(mean / 100)
    return centre - half / 100, centre + half / 100


def promising(gate: GateResult) -> bool:
    """Whether the paired gain's whole 95% interval lies above the near-noise rule's 1%
    (``gate.evidence``; False without pairs or with one)."""
    interval = _log_interval(gate.evidence.gain if gate.evidence else None)
    return interval is not None and interval[0] > FLOOR_GAIN


def confirms(gate: GateResult) -> bool:
    """Whether a fresh paired measurement confirms a tournament's accepted reading: the
    gate accepts it, or, while it still asks for pairs, the paired gain's whole 95%
    interval lies above 1% (``promising``) and every gating shape's whole interval lies
    above a 5% regression.  The reading it confirms has passed the gate already; the
    fresh one has only to show that the gain was not picked from the noise of several
    entries (an A/A entry is then committed less often than in a single round)."""
    if gate.decision.accepted:
        return True
    if gate.decision is not Decision.NEEDS_REMEASURE or not promising(gate):
        return False
    found = gate.evidence.shapes.values() if gate.evidence else ()
    shapes = [_log_interval(est) for est in found]
    return bool(shapes) and all(i is not None and i[0] > -SEVERE_LOG for i in shapes)


def fell(gate: GateResult) -> bool:
    """Whether the aggregate went down: with pairs, the paired gain's whole 95% interval
    lies below zero (a drop within the noise is not one); without pairs (two merged
    scores), the candidate's aggregate is below the best's.  A veto or a FAIL, which
    measures no aggregate, is not a fall."""
    if not gate.shapes or any(s.check != "PASS" for s in gate.shapes):
        return False
    if gate.pair_gains_pct:
        interval = _log_interval(gate.evidence.gain if gate.evidence else None)
        if interval is not None:
            return interval[1] < 0
        return max(gate.pair_gains_pct) < 0  # one pair: its reading is all there is
    return gate.candidate_aggregate < gate.best_aggregate


def outpaced(gate: GateResult, leader_pct: float) -> bool:
    """Whether the paired gain's whole 95% interval lies below ``leader_pct`` (G - 1 in
    percent, another candidate's accepted reading against the same incumbent): more
    pairs could not lift this reading above it, so in a tournament, which commits the
    accepted entry with the highest reading, it cannot win (False without pairs or with
    one)."""
    interval = _log_interval(gate.evidence.gain if gate.evidence else None)
    if interval is None or leader_pct <= -100:
        return False
    return interval[1] < math.log1p(leader_pct / 100)


def _recorded(judged: GateResult, ev: Evidence) -> GateResult:
    """``judged`` with the paired evidence it was given, whichever rule decided: each
    pair's G_i - 1 (percent) and the paired gain and every gating shape's paired mean
    with its 95% interval and pairs (``evidence``), so that a gain is shown with its
    spread and final acceptance's held-out rule (``runner.judge.heldout``) judges every
    shape on its own interval, an early accept above the threshold included."""
    gains = tuple(100 * math.expm1(g) for g in ev.gains)
    return replace(judged, pair_gains_pct=gains, evidence=_evidence_record(ev))


def _gain(facts: _Facts) -> float:
    """G - 1 on the merged scores' gating shapes."""
    return math.expm1(math.fsum(facts.logs[lb] for lb in facts.gating) / len(facts.gating))


def _judge(facts: _Facts, ev: Evidence, final: bool) -> GateResult:
    """Rules 3-6 on a comparable, all-PASS pair of scores with paired evidence: the
    clear cases only while pairs are still coming in, and on the paired evidence once
    the required pairs are in."""
    gain = _gain(facts)
    if ev.n < facts.required_pairs and not final:
        return _early(facts, ev, gain)
    return _paired(facts, ev, gain, final)


def _over(facts: _Facts, gain: float) -> str:
    """Why an aggregate at or over the threshold is accepted (rule 5)."""
    return f"aggregate {_pct(gain)} >= threshold {100 * facts.threshold:.2f}%"


def _single(facts: _Facts, gain: float) -> GateResult:
    """One comparison of two merged scores and nothing else (``campaign gate``)."""
    if gain <= 0:
        why = f"aggregate not improved: {_pct(gain)} (merely equal is not an improvement)"
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * gain)
    severe = _severe(facts, facts.gating)
    if severe:
        why = "shape(s) regressed by 5% or more: " + severe
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * gain)
    if gain >= facts.threshold:
        return _accept(facts, _over(facts, gain), 100 * gain)
    why = (
        f"aggregate {_pct(gain)} is below the threshold {100 * facts.threshold:.2f}%: "
        f"near noise; measure {facts.required_pairs} fresh interleaved pair(s) and gate again"
    )
    return _result(
        facts, Decision.NEEDS_REMEASURE, [why], 100 * gain, more_pairs=facts.required_pairs
    )


def _early(facts: _Facts, ev: Evidence, gain: float) -> GateResult:
    """Fewer pairs than the rules need: only a reading beyond the threshold either way
    decides (the threshold is 3 sigma_G: one reading that far out is not noise), and
    only when every pair read beyond it too.  sigma_G comes from the baseline; where a
    round is noisier than its baseline, the pairs disagree, and an aggregate beyond the
    threshold can be one pair's noise (an A/A read +8.70% on 2 pairs against a 4.06%
    threshold on the 2-core demo, docs/benchmarks.md): then it waits for the pairs.  A
    shape reading a 5% regression, or anything nearer, waits for the pairs as well."""
    need, have = facts.required_pairs, ev.n
    readings = [math.expm1(g) for g in ev.gains]
    beyond = (gain >= facts.threshold and min(readings) >= facts.threshold) or (
        gain <= -facts.threshold and max(readings) <= -facts.threshold
    )
    if beyond and gain > 0 and not _severe(facts, facts.gating):
        return _accept(facts, _over(facts, gain), 100 * gain, have)
    if beyond and gain < 0:
        why = f"aggregate {_pct(gain)}: a slow-down beyond the threshold {_pct(facts.threshold)}"
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * gain, pairs_used=have)
    split = ""
    if abs(gain) >= facts.threshold and not beyond:
        each = ", ".join(_pct(r) for r in readings)
        split = f" (beyond the threshold {_pct(facts.threshold)}, but its pairs read {each})"
    why = (
        f"aggregate {_pct(gain)} after {have} pair(s){split}: not clear; measure "
        f"{need - have} more fresh interleaved pair(s) (need {need}) and gate again"
    )
    return _result(
        facts, Decision.NEEDS_REMEASURE, [why], 100 * gain, pairs_used=have, more_pairs=need - have
    )


def _paired(facts: _Facts, ev: Evidence, gain: float, final: bool) -> GateResult:
    """Rules 3-6 on the paired evidence (docs/measurement.md §4.2): each rule decides
    when its evidence is clear; otherwise more pairs, and at the cap (``final``) the
    point estimates decide and "too volatile to tell" rolls back."""
    if ev.gain.high < FLOOR_GAIN:
        why = f"not improved by more than 1%: {ev.summary()}"
        return _rolled_back(facts, ev, why)
    clear, unclear = _paired_severe(ev)
    capped: list[str] = []
    if final:  # at the cap an unclear shape is judged by its paired mean alone
        capped = [lb for lb in unclear if ev.shapes[lb].mean <= -SEVERE_LOG]
        unclear = []
    if clear or capped:
        named = [_named(ev, clear)] if clear else []
        if capped:  # say so: its interval may reach far above -5% (a noisy machine)
            named.append(
                f"{_named(ev, capped)} (by its mean at the measurement cap, {ev.n} pair(s): "
                "its 95% interval is still too wide to tell whether it regressed; on a "
                "quieter machine fewer pairs would settle it)"
            )
        why = "shape(s) regressed by 5% or more: " + "; ".join(named)
        return _rolled_back(facts, ev, why)
    if unclear:
        more = min(_pairs_to_resolve(ev, unclear) - ev.n, ev.n)
        why = f"shape(s) near a 5% regression, within their noise: {_named(ev, unclear)}"
        return _remeasure(facts, ev, why, more)
    if gain >= facts.threshold and ev.gain.low > 0:
        why = f"{_over(facts, gain)}; {ev.summary()}"
        return _accept(facts, why, 100 * gain, ev.n)
    passed, figures = noise_rule(ev)
    m = 100 * math.expm1(ev.gain.mean)
    band = f"aggregate {_pct(gain)} is below the threshold {100 * facts.threshold:.2f}%"
    if passed and gain > 0:  # the merged scores must agree that it is a gain
        return _accept(facts, f"{band}; {ev.summary()}; {figures} (m > 1%, s < m/2)", m, ev.n)
    need = ev.pairs_for_precision()
    if final:
        why = (
            f"too volatile to tell: {ev.summary()}; {figures} (accepting needs mean > 1% "
            f"and stdev < half of it); about {max(need, ev.n + 1)} pairs would be needed"
        )
        return _rolled_back(facts, ev, why)
    # at most as many again as are in: a clear case, either way, stops at the next look
    more = min(max(need - ev.n, ev.remeasure_size()), ev.n)
    return _remeasure(facts, ev, f"{band}: near noise; {ev.summary()}; {figures}", more)


def _rolled_back(facts: _Facts, ev: Evidence, why: str) -> GateResult:
    m = 100 * math.expm1(ev.gain.mean)
    return _result(facts, Decision.ROLLED_BACK, [why], m, pairs_used=ev.n)


def _remeasure(facts: _Facts, ev: Evidence, why: str, more: int) -> GateResult:
    more = max(1, more)
    reason = f"{why}; measure {more} more fresh interleaved pair(s) and gate again"
    m = 100 * math.expm1(ev.gain.mean)
    return _result(facts, Decision.NEEDS_REMEASURE, [reason], m, pairs_used=ev.n, more_pairs=more)


def _paired_severe(ev: Evidence) -> tuple[list[str], list[str]]:
    """Gating shapes whose paired mean is a 5% regression beyond its noise (the whole
    interval at or below -5%), and those whose interval straddles -5% (unclear); at
    the cap an unclear shape is judged by its mean alone."""
    clear = [lb for lb, est in ev.shapes.items() if est.high <= -SEVERE_LOG]
    unclear = [lb for lb, est in ev.shapes.items() if est.low <= -SEVERE_LOG < est.high]
    return clear, unclear


def _named(ev: Evidence, labels: Sequence[str]) -> str:
    return ", ".join(f"{lb} {ev.shapes[lb].pct()}" for lb in labels)


def _pairs_to_resolve(ev: Evidence, labels: Sequence[str]) -> int:
    """The pairs at which each of ``labels``' intervals would clear -5% at the noise
    measured so far (at most MAX_REMEASURE_SIZE more than now)."""
    need = ev.n + 1
    for lb in labels:
        est = ev.shapes[lb]
        gap = abs(est.mean + SEVERE_LOG)
        if gap > 0 and math.isfinite(est.spread):
            need = max(need, math.ceil((Z * est.spread / gap) ** 2))  # large-n estimate
    return min(need, ev.n + MAX_REMEASURE_SIZE)


def _evidence_record(ev: Evidence) -> PairedEvidence:
    return PairedEvidence(
        Interval.from_dict(ev.gain.to_dict()),
        {lb: Interval.from_dict(est.to_dict()) for lb, est in ev.shapes.items()},
        ev.remeasure_size(),
    )


def _accept(
    facts: _Facts,
    why: str,
    delta_pct: float,
    pairs_used: int = 0,
) -> GateResult:
    """ACCEPTED, or ACCEPTED_TRADEOFF naming every shape that went down."""
    reasons = [why]
    if facts.targeted:
        reasons.append(_targeted_note(facts))
    down = [lb for lb in facts.logs if facts.logs[lb] < 0]
    for lb in down:
        gated = lb in facts.gating
        tag = "trade-off" if gated else "trade-off (outside the targeted shapes)"
        reasons.append(f"{tag}: {lb} {_pct(math.expm1(facts.logs[lb]))}")
    decision = Decision.ACCEPTED_TRADEOFF if down else Decision.ACCEPTED
    return _result(facts, decision, reasons, delta_pct, pairs_used=pairs_used)


def _targeted_note(facts: _Facts) -> str:
    note = f"targeted-shape round: judged on {', '.join(facts.gating)}"
    outside = [lb for lb in facts.logs if lb not in facts.gating]
    severe = _severe(facts, outside)
    if severe:
        note += f"; not gating, regressed by 5% or more: {severe}"
    return note


def _severe(facts: _Facts, labels: Sequence[str]) -> str:
    """'label -x.xx%' for each of ``labels`` at or below -ln(1.05); '' when none."""
    hits = [lb for lb in labels if facts.logs[lb] <= -SEVERE_LOG]
    return ", ".join(f"{lb} {_pct(math.expm1(facts.logs[lb]))}" for lb in hits)


def _pct(fraction: float) -> str:
    return f"{100 * fraction:+.2f}%"


# ---------------------------------------------------------------- building results


def _facts(
    best: Score,
    candidate: Score,
    sigma_g: float | None,
    targeted_shapes: Sequence[str],
    min_pairs: int,
) -> _Facts:
    cand = candidate.by_label()
    logs = {
        s.label: math.log(positive(cand[s.label].value) / positive(s.value)) for s in best.shapes
    }
    unknown = [lb for lb in targeted_shapes if lb not in logs]
    if unknown:
        raise ConfigError(
            f"targeted shape(s) {unknown} are not in the scored shape set; name shapes "
            f"from {sorted(logs)}"
        )
    targeted = set(targeted_shapes)
    gating = tuple(lb for lb in logs if lb in targeted) or tuple(logs)
    return _Facts(
        best=best,
        candidate=candidate,
        logs=logs,
        gating=gating,
        threshold=accept_threshold(sigma_g),
        required_pairs=required_pairs(sigma_g, min_pairs),
    )


def _result(
    facts: _Facts,
    decision: Decision,
    reasons: list[str],
    delta_pct: float,
    *,
    pairs_used: int = 0,
    more_pairs: int = 0,
) -> GateResult:
    return GateResult(
        decision=decision,
        metric=facts.best.metric,
        best_aggregate=facts.best.aggregate,
        candidate_aggregate=facts.candidate.aggregate,
        delta_pct=delta_pct,
        shapes=_shape_deltas(facts.best, facts.candidate),
        regressed=tuple(lb for lb in facts.logs if facts.logs[lb] < 0),
        reasons=tuple(reasons),
        threshold_pct=100 * facts.threshold,
        pairs_used=pairs_used,
        more_pairs=more_pairs,
    )


def _shape_deltas(best: Score, candidate: Score) -> tuple[ShapeDelta, ...]:
    """Per-shape comparison in best's order; a shape absent from ``candidate`` shows
    check '-' (only possible with a veto)."""
    cand = candidate.by_label()
    out = []
    for s in best.shapes:
        c = cand.get(s.label)
        value = c.value if c else None
        delta = 100 * (value / s.value - 1) if value is not None and s.value else None
        out.append(ShapeDelta(s.label, s.value, value, delta, c.check if c else "-"))
    return tuple(out)


def _veto(best: Score, candidate: Score, vetoes: Sequence[str]) -> GateResult:
    reasons = tuple(f"veto: {v}" for v in vetoes)
    return _plain_rollback(best, candidate, reasons)


def _failed(best: Score, candidate: Score) -> GateResult:
    failed = [s.label for s in candidate.shapes if s.check != "PASS"]
    why = f"Check FAIL in {len(failed)} shape(s): {', '.join(failed)} (aggregate is 0)"
    return _plain_rollback(best, candidate, (why,))


def _plain_rollback(best: Score, candidate: Score, reasons: tuple[str, ...]) -> GateResult:
    """A rollback decided before any statistics (veto, FAIL)."""
    ratio = candidate.aggregate / best.aggregate if best.aggregate > 0 else 1.0
    shapes = _shape_deltas(best, candidate)
    regressed = tuple(s.label for s in shapes if s.delta_pct is not None and s.delta_pct < 0)
    return GateResult(
        decision=Decision.ROLLED_BACK,
        metric=best.metric,
        best_aggregate=best.aggregate,
        candidate_aggregate=candidate.aggregate,
        delta_pct=100 * (ratio - 1),
        shapes=shapes,
        regressed=regressed,
        reasons=reasons,
    )


# ---------------------------------------------------------------- calibration


def calibrate_sigma(passes: Sequence[Mapping[str, float]]) -> tuple[float, dict[str, float]]:
    """sigma_G and per-shape sigma_s from >= 2 passes of the same code (label -> metric).

    x_p = mean over shapes of ln v(p, s); sigma_G = sample stdev of x_p (the spread of
    the pass's log geomean); sigma_s = sample stdev over passes of ln v(p, s).  Both are
    fractions (log spread ~ relative spread)."""
    if len(passes) < 2:
        raise ConfigError(
            f"calibration needs at least 2 passes of the same code, got {len(passes)}; "
            "measure more passes (at least 5, docs/measurement.md §4.1)"
        )
    labels = list(passes[0])
    if not labels:
        raise ConfigError("calibration pass 1 has no shapes")
    for i, p in enumerate(passes, start=1):
        check_same_labels(labels, p, f"calibration pass {i}")
        bad = [lb for lb, v in p.items() if not usable(v)]
        if bad:
            raise ConfigError(f"calibration pass {i} has unusable values for {bad}")
    logs = [{lb: math.log(p[lb]) for lb in labels} for p in passes]
    xs = [math.fsum(lp.values()) / len(labels) for lp in logs]
    per_shape = {lb: stdev([lp[lb] for lp in logs]) for lb in labels}
    return stdev(xs), per_shape
