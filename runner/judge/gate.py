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
6. otherwise near noise: with fewer than the required paired samples (``min_pairs``,
   at least 5 when sigma_G > 1%) -> NEEDS_REMEASURE; with enough, G_i = geomean over
   shapes of cand/incumbent for pair i, m and s the mean and sample stdev of G_i - 1:
   accept only if m > 1%, s < m/2 and no shape's mean d over the pairs is at or below
   -ln(1.05); otherwise ROLLED_BACK (noise).

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
from runner.core.outcomes import Decision, GateResult, PairSample, Score, ShapeDelta
from runner.core.stats import mean, stdev

SEVERE_LOG = math.log(1.05)  # d <= -SEVERE_LOG: a shape regressed by 5% or more
MIN_THRESHOLD = 0.02  # the direct-accept floor, 2%
NOISE_MIN_GAIN = 0.01  # the paired rule needs a mean gain above 1%
VOLATILE_SIGMA = 0.01  # sigma_G above 1% -> at least 5 pairs
VOLATILE_PAIRS = 5


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
) -> GateResult:
    """Judge ``candidate`` against ``best`` (see the module docstring for the rules).
    Raises ConfigError when the inputs cannot be compared (different shapes or metric,
    a best score with FAIL rows, malformed pairs or sigma)."""
    _check_sigma(sigma_g)
    if min_pairs < 1:
        raise ConfigError(f"min_pairs must be at least 1, got {min_pairs}")
    if vetoes:
        return _veto(best, candidate, vetoes)
    _check_scores(best, candidate)
    if candidate.n_fail:
        return _failed(best, candidate)
    facts = _facts(best, candidate, sigma_g, targeted_shapes, min_pairs)
    return replace(_judge(facts, pairs), pair_gains_pct=_pair_gains_pct(facts, pairs))


def _pair_gains_pct(facts: _Facts, pairs: Sequence[PairSample]) -> tuple[float, ...]:
    """G_i - 1 (percent) of each pair on the gating shapes, recorded whichever rule
    decided so that a gain can be shown with its spread; () when a pair is unusable."""
    usable = all(
        all(_usable(side.get(lb)) for lb in facts.logs for side in (p.incumbent, p.candidate))
        for p in pairs
    )
    return tuple(100 * _pair_gain(p, facts.gating) for p in pairs) if usable else ()


def _judge(facts: _Facts, pairs: Sequence[PairSample]) -> GateResult:
    """Rules 3-6 on a comparable, all-PASS pair of scores."""
    gain = math.expm1(math.fsum(facts.logs[lb] for lb in facts.gating) / len(facts.gating))
    if gain <= 0:
        why = f"aggregate not improved: {_pct(gain)} (merely equal is not an improvement)"
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * gain)
    severe = _severe(facts, facts.gating)
    if severe:
        why = "shape(s) regressed by 5% or more: " + severe
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * gain)
    if gain >= facts.threshold:
        why = f"aggregate {_pct(gain)} >= threshold {100 * facts.threshold:.2f}%"
        return _accept(facts, why, 100 * gain)
    return _near_noise(facts, pairs, gain)


def _near_noise(facts: _Facts, pairs: Sequence[PairSample], gain: float) -> GateResult:
    """Rule 6: below the threshold, only fresh paired passes can tell."""
    band = f"aggregate {_pct(gain)} is below the threshold {100 * facts.threshold:.2f}%"
    have = len(pairs)
    if have < facts.required_pairs:
        more = facts.required_pairs - have
        why = (
            f"{band}: near noise; measure {more} more fresh interleaved pair(s) "
            f"(need {facts.required_pairs}, have {have}) and gate again"
        )
        return _result(facts, Decision.NEEDS_REMEASURE, [why], 100 * gain, pairs_used=have)
    _check_pairs(pairs, facts.logs)
    gains = [_pair_gain(p, facts.gating) for p in pairs]
    m, s = mean(gains), stdev(gains)
    summary = f"mean gain {_pct(m)}, stdev {100 * s:.2f}% over {have} pairs"
    severe = _severe_paired(pairs, facts.gating)
    if severe:
        why = f"{band}; paired: {summary}; shape(s) regressed by 5% or more: {severe}"
        return _result(facts, Decision.ROLLED_BACK, [why], 100 * m, pairs_used=have)
    if m > NOISE_MIN_GAIN and s < m / 2:
        return _accept(facts, f"{band}; paired: {summary} (m > 1%, s < m/2)", 100 * m, have)
    why = f"noise: {summary} (accepting needs mean > 1% and stdev < half of it)"
    return _result(facts, Decision.ROLLED_BACK, [why], 100 * m, pairs_used=have)


def _accept(facts: _Facts, why: str, delta_pct: float, pairs_used: int = 0) -> GateResult:
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


def _severe_paired(pairs: Sequence[PairSample], labels: Sequence[str]) -> str:
    """Shapes whose mean d over the pairs is at or below -ln(1.05)."""
    hits = []
    for lb in labels:
        d = math.fsum(math.log(p.candidate[lb] / p.incumbent[lb]) for p in pairs) / len(pairs)
        if d <= -SEVERE_LOG:
            hits.append(f"{lb} {_pct(math.expm1(d))}")
    return ", ".join(hits)


def _pair_gain(pair: PairSample, labels: Sequence[str]) -> float:
    """G_i - 1 for one pair: the geomean over ``labels`` of candidate/incumbent, less 1."""
    logs = (math.log(pair.candidate[lb] / pair.incumbent[lb]) for lb in labels)
    return math.expm1(math.fsum(logs) / len(labels))


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
        s.label: math.log(_positive(cand[s.label].value) / _positive(s.value)) for s in best.shapes
    }
    unknown = [lb for lb in targeted_shapes if lb not in logs]
    if unknown:
        raise ConfigError(
            f"targeted shape(s) {unknown} are not in the scored shape set; name shapes "
            f"from {sorted(logs)}"
        )
    targeted = set(targeted_shapes)
    gating = tuple(lb for lb in logs if lb in targeted) or tuple(logs)
    sigma = sigma_g or 0.0
    return _Facts(
        best=best,
        candidate=candidate,
        logs=logs,
        gating=gating,
        threshold=max(MIN_THRESHOLD, 3 * sigma),
        required_pairs=required_pairs(sigma_g, min_pairs),
    )


def _result(
    facts: _Facts,
    decision: Decision,
    reasons: list[str],
    delta_pct: float,
    *,
    pairs_used: int = 0,
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


# ---------------------------------------------------------------- input checks


def _check_sigma(sigma_g: float | None) -> None:
    if sigma_g is not None and not (math.isfinite(sigma_g) and sigma_g >= 0):
        raise ConfigError(
            f"sigma_G must be a non-negative fraction (e.g. 0.004), got {sigma_g!r}; "
            "re-run the BASELINE calibration"
        )


def _check_scores(best: Score, candidate: Score) -> None:
    """Both scores must be comparable: same metric, same labels, best all PASS."""
    if best.metric != candidate.metric:
        raise ConfigError(
            f"best is scored on {best.metric!r} but the candidate on "
            f"{candidate.metric!r}; score both with the same metric"
        )
    for name, sc in (("best", best), ("candidate", candidate)):
        labels = [s.label for s in sc.shapes]
        if len(set(labels)) != len(labels) or not labels:
            raise ConfigError(f"the {name} score has no shapes or duplicate labels")
    _check_same_labels([s.label for s in best.shapes], candidate.by_label(), "candidate")
    failed = [s.label for s in best.shapes if s.check != "PASS" or not _usable(s.value)]
    if failed:
        raise ConfigError(
            f"the best score has FAIL or unusable shapes {failed}; the best must be all "
            "PASS — drop failing shapes from the shape set at BASELINE"
        )


def _check_same_labels(want: Sequence[str], have: Mapping[str, object], what: str) -> None:
    missing = [lb for lb in want if lb not in have]
    extra = sorted(lb for lb in have if lb not in set(want))
    if missing or extra:
        raise ConfigError(
            f"the {what} does not cover the same shapes as the best: missing {missing}, "
            f"extra {extra}; measure exactly the best's shape set (no shape may be skipped)"
        )


def _check_pairs(pairs: Sequence[PairSample], logs: Mapping[str, float]) -> None:
    labels = list(logs)
    for i, pair in enumerate(pairs, start=1):
        for side, values in (("incumbent", pair.incumbent), ("candidate", pair.candidate)):
            _check_same_labels(labels, values, f"pair {i} ({side})")
            bad = [lb for lb, v in values.items() if not _usable(v)]
            if bad:
                raise ConfigError(
                    f"pair {i} ({side}) has non-positive or non-finite values for {bad}; "
                    "re-measure that pair"
                )


def _usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def _positive(value: float | None) -> float:
    if value is None or not _usable(value):
        raise ConfigError(f"a PASS shape has no usable value ({value!r}); re-score the CSV")
    return value


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
        _check_same_labels(labels, p, f"calibration pass {i}")
        bad = [lb for lb, v in p.items() if not _usable(v)]
        if bad:
            raise ConfigError(f"calibration pass {i} has unusable values for {bad}")
    logs = [{lb: math.log(p[lb]) for lb in labels} for p in passes]
    xs = [math.fsum(lp.values()) / len(labels) for lp in logs]
    per_shape = {lb: stdev([lp[lb] for lp in logs]) for lb in labels}
    return stdev(xs), per_shape
