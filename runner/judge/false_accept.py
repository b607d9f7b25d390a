"""The campaign's false-accept budget: for each attempt the gate judged, how likely it
was to be ACCEPTED had its change no gain at all, and how much of one budget the
campaign has spent (docs/measurement.md §4.6).

A gate that accepts a no-gain change at some small rate per attempt accepts one on
some attempt of a long enough campaign: every new hypothesis is a new draw (a
resubmission of a rolled-back change is refused, ``runner.judge.resubmission``, or with
``validate --resubmit`` judged against what the budget has left,
``against_what_is_left``).  The bound here needs nothing but what a round records: its
pairs' readings (``pair_gains_pct``), the threshold, and the pair counts the gate
looked at (``looks``; a record without them is taken to have looked at every pair
count from the rules' first one up, which over-states).

At a look with n pairs, the pair gains of a change with no gain are taken as
N(0, s^2), s the spread of one pair's log gain the round measured, and each rule that
can accept is bounded on its own:

* fewer pairs than the rules need (the early rule): every pair must read at or beyond
  the threshold T: ``(1 - Phi(ln(1+T) / s)) ** n``;
* the paired rule: the mean at or beyond T with its interval above 0: at most
  ``1 - Phi(ln(1+T) sqrt(n) / s)``;
* the near-noise rule: c re-measurements (runs of the pairs, as many as the noise the
  gate measured asks for), at least 3, their mean above 1% and their stdev below half
  of it.  The mean is the pairs' mean, so at most ``1 - Phi(ln(1.01) sqrt(n) / s)``; the
  stdev condition is the mean over its standard error above 2 sqrt(c), a Student t with
  c - 1 degrees of freedom under no gain, at most ``P(t_2 > 2 sqrt(3))`` (3.7%, the
  fewest runs) whichever c the gate's own reading of the noise picks: the smaller of
  the two.

The per-shape rules only roll back, so leaving them out keeps a bound.  An attempt's
figure is the sum over its looks and the campaign's the sum over its attempts (union
bounds: never below the chance that at least one ACCEPTED round holds no gain).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runner.core.outcomes import Decision, GateResult, RoundResult, Status
from runner.core.stats import stdev
from runner.judge.evidence import FLOOR_GAIN, MIN_REMEASUREMENTS
from runner.judge.gate import required_pairs

# The chance, summed over a campaign's judged attempts, that the campaign may spend on
# accepting a change with no gain before its status says so
CAMPAIGN_BUDGET = 0.05
_SIMPSON_STEPS = 2000  # even; the t tail's integral to far below 1e-6


def normal_tail(x: float) -> float:
    """P(Z > x) for a standard normal Z."""
    return 0.5 * math.erfc(x / math.sqrt(2.0))


def t_tail(x: float, dof: int) -> float:
    """P(T > x) for Student's t with ``dof`` degrees of freedom (x >= 0).  With
    t = sqrt(dof) tan(theta) the density is proportional to cos(theta) ** (dof - 1)
    on (-pi/2, pi/2): Simpson's rule from theta(x) to pi/2."""
    if dof < 1:
        raise ValueError(f"a t distribution needs at least 1 degree of freedom, got {dof}")
    lo, hi = math.atan(x / math.sqrt(dof)), math.pi / 2
    h = (hi - lo) / _SIMPSON_STEPS
    total = 0.0
    for i in range(_SIMPSON_STEPS + 1):
        weight = 1 if i in (0, _SIMPSON_STEPS) else (4 if i % 2 else 2)
        total += weight * math.cos(lo + i * h) ** (dof - 1)
    scale = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2)) / math.sqrt(math.pi)
    return scale * total * h / 3


def _noise_t() -> float:
    """The near-noise rule's stdev condition at its fewest re-measurements (3): the
    largest chance it has of passing a change with no gain, whatever c is taken."""
    runs = MIN_REMEASUREMENTS
    return t_tail(2 * math.sqrt(runs), runs - 1)


_NOISE_T = _noise_t()


def look_bound(n: int, spread: float, threshold: float, required: int) -> float:
    """The chance that one look at ``n`` pairs accepts a change with no gain:
    ``spread``, one pair's log gain stdev; ``threshold``, T as a fraction; ``required``,
    the pairs the paired rules need (fewer: the early rule only)."""
    if n < 1 or spread <= 0 or not math.isfinite(spread):
        raise ValueError(f"a look needs pairs and a finite spread, got n={n}, s={spread}")
    cut = math.log1p(threshold)
    if n < required:
        return normal_tail(cut / spread) ** n
    direct = normal_tail(cut * math.sqrt(n) / spread)
    noise = 0.0
    if n >= MIN_REMEASUREMENTS:
        noise = min(_NOISE_T, normal_tail(FLOOR_GAIN * math.sqrt(n) / spread))
    return min(1.0, direct + noise)


def _threshold(gate: GateResult) -> float | None:
    return None if gate.threshold_pct is None else gate.threshold_pct / 100


def _required(threshold: float) -> int:
    """The pairs the rules needed at this threshold: T is max(2%, 3 sigma_G)."""
    return required_pairs(threshold / 3 if threshold > 0.02 else None)


def looks_of(gate: GateResult, required: int) -> tuple[int, ...]:
    """The pair counts the gate looked at: as recorded, else every count from the
    rules' first look (``required``, or the pairs used when fewer) up to the last."""
    if gate.looks:
        return gate.looks
    n = gate.pairs_used or len(gate.pair_gains_pct)
    return tuple(range(min(required, n), n + 1)) if n else ()


def attempt_bound(gate: GateResult | None) -> float | None:
    """The chance that this attempt's gate accepted a change with no gain (module
    docstring); None where it is not a paired judgement of at least two pairs (a veto,
    a FAIL, one pair: no spread to take it from)."""
    if gate is None or len(gate.pair_gains_pct) < 2:
        return None
    threshold = _threshold(gate)
    if threshold is None:
        return None
    spread = stdev([math.log1p(g / 100) for g in gate.pair_gains_pct])
    if spread <= 0 or not math.isfinite(spread):
        return None
    required = _required(threshold)
    looks = looks_of(gate, required)
    return min(1.0, math.fsum(look_bound(n, spread, threshold, required) for n in looks))


@dataclass(frozen=True)
class Spent:
    """What a campaign has spent of its false-accept budget: each judged attempt's
    bound (round, chance), the sum, and the budget."""

    attempts: tuple[tuple[int, float], ...]
    budget: float = CAMPAIGN_BUDGET

    @property
    def total(self) -> float:
        return min(1.0, math.fsum(chance for _, chance in self.attempts))

    @property
    def over(self) -> bool:
        return self.total > self.budget

    def largest(self) -> tuple[int, float] | None:
        return max(self.attempts, key=lambda a: a[1]) if self.attempts else None

    def line(self) -> str:
        """'false-accept budget: 0.41% of 5% spent over 6 judged attempts (largest:
        round-4, 0.30%)', and what to do when it is spent."""
        if not self.attempts:
            return "false-accept budget: nothing spent (no attempt judged on pairs yet)"
        big = self.largest()
        largest = f" (largest: round-{big[0]}, {_pct(big[1])})" if big else ""
        head = (
            f"false-accept budget: {_pct(self.total)} of {_pct(self.budget)} spent over "
            f"{len(self.attempts)} judged attempt(s){largest}"
        )
        if not self.over:
            return head
        return (
            f"{head}: SPENT. The chance that some ACCEPTED round of this campaign holds "
            "no gain is no longer small: `campaign accept` measures the whole lineage "
            "against the base before anything ships"
        )

    def to_dict(self) -> dict[str, object]:
        return {
            "budget": self.budget,
            "spent": self.total,
            "over": self.over,
            "attempts": [{"round": n, "bound": chance} for n, chance in self.attempts],
        }


# the verdicts a gate reached on a measurement (a FAILED round was never judged on pairs)
JUDGED = (Status.ACCEPTED, Status.ROLLED_BACK)


def spent(judged: Sequence[tuple[int, GateResult | None]]) -> Spent:
    """The campaign's spending over its (round, gate) judgements, in round order."""
    attempts = [(n, bound) for n, gate in judged if (bound := attempt_bound(gate)) is not None]
    return Spent(tuple(attempts))


def campaign_spent(results: Sequence[RoundResult]) -> Spent:
    """What a campaign's closed rounds spent: its ACCEPTED and ROLLED BACK rounds."""
    ordered = sorted(results, key=lambda r: r.round)
    return spent([(r.round, r.gate) for r in ordered if r.status in JUDGED])


def against_what_is_left(
    gate: GateResult, again: int, earlier: Sequence[RoundResult]
) -> GateResult:
    """A resubmission's verdict (``validate --resubmit``: the patch runs rolled-back
    round ``again``'s code once more, ``runner.judge.resubmission``): an accepting one
    stands only when this attempt's own bound fits in what the campaign's budget has
    left after its ``earlier`` rounds; else it is ROLLED BACK saying both figures.  A
    second draw of one experiment must not spend a budget the first already used."""
    if not gate.decision.accepted:
        return gate
    left = max(0.0, CAMPAIGN_BUDGET - campaign_spent(earlier).total)
    bound = attempt_bound(gate)
    if bound is not None and bound <= left:
        why = (
            f"resubmission of round-{again}'s code: this attempt's false-accept bound "
            f"{_pct(bound)} fits in the {_pct(left)} the campaign's budget has left"
        )
        return replace(gate, reasons=(*gate.reasons, why))
    figure = (
        "no bound (too few pairs)" if bound is None else f"a false-accept bound of {_pct(bound)}"
    )
    why = (
        f"ROLLED BACK as a resubmission of round-{again}'s code: its reading would accept "
        f"with {figure}, more than the {_pct(left)} left of the campaign's "
        f"{_pct(CAMPAIGN_BUDGET)} false-accept budget; a second draw of the same code is "
        "judged against what is left (docs/measurement.md §4.6)"
    )
    return replace(gate, decision=Decision.ROLLED_BACK, reasons=(why, *gate.reasons))


def _pct(fraction: float) -> str:
    pct = 100 * fraction
    return f"{pct:.2f}%" if pct >= 0.01 or pct == 0 else f"{pct:.1e}%"
