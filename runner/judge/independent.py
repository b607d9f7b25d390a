"""Independent metrics (docs/protocol.md §5.9): a campaign whose ``primary_metric``
names several metrics with no combined one (``"Forward TFLOPS, Backward TFLOPS"``,
upstream's comma-separated form) is judged by upstream's rule for genuinely independent
objectives: no metric aggregate may regress and at least one must improve
(``agent/skills/kernel-optimize/workflow/optimize-loop.md``, "Multi-metric handling",
Primus-Turbo a6a16cdc).

Each metric is judged by the gate (``runner.judge.gate.decide``) on its own scores and
pairs; the verdicts are combined here.  A pure function, no I/O:

1. a veto or a FAIL (the same for every metric) -> that verdict;
2. a metric whose aggregate fell (``runner.judge.gate.fell``: with pairs, its paired
   gain's whole interval below zero) -> ROLLED_BACK, naming it; so does a metric the
   gate rolled back for a core shape regressed by 5% or more;
3. a metric the gate accepted (it improved, by the gate's own rules: threshold, noise
   rule, per-shape 5%) and no other metric that still asks for pairs reads below zero
   (it might yet prove a fall) -> ACCEPTED (ACCEPTED_TRADEOFF when any metric's verdict
   was a trade-off or a metric went down within its noise);
4. otherwise, while a metric still asks for pairs -> NEEDS_REMEASURE with the most
   pairs any metric asks for; when none does -> ROLLED_BACK, no metric improved.

The combined verdict carries the first metric's figures (shapes, aggregates, evidence),
which the records show; its reasons give every metric's verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from runner.core.errors import ConfigError
from runner.core.outcomes import Decision, GateResult, PairSample, Score
from runner.judge.gate import decide, fell
from runner.judge.scoring import component_metrics


def is_independent(primary_metric: str) -> bool:
    return len(component_metrics(primary_metric)) > 1


def decide_metrics(
    best: Mapping[str, Score],
    candidate: Mapping[str, Score],
    *,
    pairs: Mapping[str, Sequence[PairSample]] | None = None,
    sigma_g: float | None = None,
    vetoes: Sequence[str] = (),
    targeted_shapes: Sequence[str] = (),
    min_pairs: int = 3,
    final: bool = False,
) -> GateResult:
    """The gate on each metric of ``best`` (metric -> score, in the manifest's order)
    and the verdicts combined by the independent-metrics rule (module docstring); one
    metric is the gate's verdict as it is."""
    if not best or set(best) != set(candidate):
        raise ConfigError(
            f"independent metrics: the best scores {sorted(best)} and the candidate's "
            f"{sorted(candidate)} must name the same metrics"
        )
    each = {
        metric: decide(
            best[metric],
            candidate[metric],
            sigma_g=sigma_g,
            pairs=(pairs or {}).get(metric, ()),
            vetoes=vetoes,
            targeted_shapes=targeted_shapes,
            min_pairs=min_pairs,
            final=final,
        )
        for metric in best
    }
    return combine(each)


def _line(metric: str, gate: GateResult) -> str:
    return f"{metric}: {gate.decision.value} ({gate.delta_pct:+.2f}%): {'; '.join(gate.reasons)}"


def combine(each: Mapping[str, GateResult]) -> GateResult:
    """One verdict from each metric's (metric -> verdict, in order; rules 1-4 of the
    module docstring)."""
    first = next(iter(each.values()))
    if len(each) == 1:
        return first
    if not first.shapes or any(s.check != "PASS" for s in first.shapes):
        return first  # a veto or a FAIL: decided before any metric was compared
    lines = [_line(metric, g) for metric, g in each.items()]
    severe = [m for m, g in each.items() if _severe(g)]
    down = [m for m, g in each.items() if fell(g)]
    if down or severe:
        why = (
            f"independent metrics: no aggregate may regress; regressed: {', '.join(down + severe)}"
        )
        return _combined(first, Decision.ROLLED_BACK, [why, *lines])
    improved = [m for m, g in each.items() if g.decision.accepted]
    waiting = {m: g for m, g in each.items() if g.decision is Decision.NEEDS_REMEASURE}
    below = [m for m, g in waiting.items() if g.delta_pct < 0]  # might still prove a fall
    if improved and not below:
        tradeoff = any(
            g.decision is Decision.ACCEPTED_TRADEOFF or g.delta_pct < 0 for g in each.values()
        )
        decision = Decision.ACCEPTED_TRADEOFF if tradeoff else Decision.ACCEPTED
        why = f"independent metrics: improved {', '.join(improved)}; none regressed"
        return _combined(first, decision, [why, *lines])
    if waiting:
        more = max(g.more_pairs for g in waiting.values())
        unclear = ", ".join(below or list(waiting))
        why = f"independent metrics: not clear yet whether {unclear} improved or regressed"
        return _combined(first, Decision.NEEDS_REMEASURE, [why, *lines], more_pairs=more)
    why = "independent metrics: no metric aggregate improved (at least one must)"
    return _combined(first, Decision.ROLLED_BACK, [why, *lines])


def _severe(gate: GateResult) -> bool:
    """The gate rolled this metric back for a core shape regressed by 5% or more."""
    return gate.decision is Decision.ROLLED_BACK and any(
        r.startswith("shape(s) regressed by 5% or more") for r in gate.reasons
    )


def _combined(
    first: GateResult, decision: Decision, reasons: list[str], *, more_pairs: int = 0
) -> GateResult:
    return replace(first, decision=decision, reasons=tuple(reasons), more_pairs=more_pairs)
