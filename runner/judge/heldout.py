"""The held-out over-fitting rule of final acceptance (docs/protocol.md §5.7).  Pure
functions, no I/O; ``runner.flow.acceptance_checks`` feeds them the full validation.

Each held-out shape is compared with its size neighbours: the nearest target shape
below it and the nearest above it in the order of work (forward FLOPs), one at an end
of the order.  A gain that varies with the shape (with its size, its M, a padded N)
gives a held-out shape a gain at least about that of the lesser of its two neighbours,
if the change is not tuned to the targets; so:

* **short of its neighbours**: where the lesser neighbour gained (floor > 0), a held-out
  shape whose gain is nearer to no gain than to the floor (below ``MIDPOINT`` times it:
  of the two explanations, "the gain holds here" and "it does not", the second fits
  better) and below the floor by more than the noise of the two figures (the 95%
  half-widths of their paired intervals, combined as independent: sqrt(h1^2 + h2^2))
  and by more than the smallest gain the protocol counts (1%,
  ``runner.judge.evidence.FLOOR_GAIN``) is over-fitting.  A held-out shape that keeps
  most of its neighbours' gain (+25% beside +30%) is not, however precise the figures;
* **regressed**: a held-out shape established 5% or more slower than at the base
  commit (the whole 95% interval of its gain at or below -5%; with no known noise,
  its reading) is over-fitting, whatever its neighbours did.  A reading past -5%
  whose interval reaches above the line is inside its own noise: not a verdict
  (``unsettled``; the full validation's gate, which judges every shape of an
  acceptance, measures more pairs for such a shape while it may, and at its cap judges
  its mean, as a round's gate does).

The lesser neighbour, not an interpolation between the two: the demo's speed-up gains
most on the smallest shape (a small M) and on the largest (an N padded to whole
128-blocks) and least in the middle, where the held-out shapes are chosen, so a line
between the neighbours predicts more than an honest change gives there.  A change
tuned to the targets (every target +10%, the held-out flat) is still short of both
neighbours.  Gains are in log space (ln(final / base)).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.judge.evidence import FLOOR_GAIN

HELDOUT_REGRESSION_PCT = 5.0  # a held-out shape this much slower: over-fitting
MIDPOINT = 0.5  # short: a held-out gain nearer to none than to the lesser neighbour's


@dataclass(frozen=True)
class ShapeGain:
    """One shape at full validation: its work (forward FLOPs), its gain ln(final /
    base) and the 95% half-width of that gain (inf when nothing is known of it)."""

    label: str
    work: float
    gain: float
    half_width: float = math.inf

    def pct(self) -> str:
        width = f"{100 * self.half_width:.2f}%" if math.isfinite(self.half_width) else "?"
        return f"{self.label} {100 * math.expm1(self.gain):+.2f}% \u00b1 {width}"


@dataclass(frozen=True)
class Shortfall:
    """A held-out shape against the lesser of its neighbours: by how much it gained
    less (``by``, log) and the tolerance it was judged with (``tolerance``, log)."""

    held: ShapeGain
    floor: ShapeGain
    by: float
    tolerance: float

    @property
    def short(self) -> bool:
        kept = self.held.gain < MIDPOINT * self.floor.gain
        return self.floor.gain > 0 and kept and self.by > self.tolerance

    def describe(self) -> str:
        gap = (
            f"short by {100 * self.by:.2f}%"
            if self.by > 0
            else f"above by {abs(100 * self.by):.2f}%"
        )
        return (
            f"{self.held.pct()} against its neighbour {self.floor.pct()} "
            f"({gap}, tolerance {100 * self.tolerance:.2f}%)"
        )


def neighbours(held: ShapeGain, targets: Sequence[ShapeGain]) -> list[ShapeGain]:
    """The nearest target at or below ``held`` in work and the nearest above (ties by
    label); one of them at an end of the order, none without targets."""
    below = [t for t in targets if t.work <= held.work]
    above = [t for t in targets if t.work > held.work]
    out = [max(below, key=lambda t: (t.work, t.label))] if below else []
    return out + ([min(above, key=lambda t: (t.work, t.label))] if above else [])


def shortfall(held: ShapeGain, targets: Sequence[ShapeGain]) -> Shortfall | None:
    """``held`` against the lesser of its neighbours' gains; None without targets."""
    near = neighbours(held, targets)
    if not near:
        return None
    floor = min(near, key=lambda t: (t.gain, t.label))
    noise = math.hypot(floor.half_width, held.half_width)
    return Shortfall(held, floor, floor.gain - held.gain, max(noise, FLOOR_GAIN))


def regressed(held: ShapeGain) -> bool:
    """Established 5% or more slower: the upper end of the 95% interval at or below
    -5% (the reading itself when no noise is known)."""
    high = math.expm1(held.gain) + (held.half_width if math.isfinite(held.half_width) else 0.0)
    return 100 * high <= -HELDOUT_REGRESSION_PCT


def unsettled(held: ShapeGain) -> bool:
    """Read 5% or more slower, with an interval that reaches above -5%: inside its own
    noise, neither over-fitting nor cleared."""
    return 100 * math.expm1(held.gain) <= -HELDOUT_REGRESSION_PCT and not regressed(held)


def judge_heldout(
    held: Sequence[ShapeGain], targets: Sequence[ShapeGain]
) -> tuple[bool, list[str]]:
    """(passed, the reasons it did not: each regressed or short held-out shape)."""
    reasons = [f"{h.pct()} (>= 5% slower)" for h in sorted(held, key=lambda h: h.label)
               if regressed(h)]  # fmt: skip
    for h in sorted(held, key=lambda h: h.label):
        found = shortfall(h, targets)
        if found is not None and found.short and not regressed(h):
            reasons.append(found.describe())
    return not reasons, reasons


def unsettled_notes(held: Sequence[ShapeGain]) -> list[str]:
    """One line per held-out shape read 5% or more slower inside its own noise."""
    return [
        f"{h.pct()}: read 5% or more slower, but its 95% interval reaches "
        f"{100 * (math.expm1(h.gain) + h.half_width):+.2f}%: within its noise, not "
        "judged over-fitting (more pairs would tell)"
        for h in sorted(held, key=lambda h: h.label)
        if unsettled(h)
    ]
