"""The held-out over-fitting rule of final acceptance (docs/protocol.md §5.7).  Pure
functions, no I/O; ``runner.flow.acceptance_checks`` feeds them the full validation
(``heldout_verdict``), ``runner.compare.loop`` a quick round's unannounced shape.

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

Beyond the largest target (a held-out shape with only a neighbour below it in work) the
floor is that neighbour's gain scaled by the ratio of their work (``Shortfall.scale``):
an honest saving of fixed cost per call (a launch, a scale, a copy) gives each shape a
gain inversely proportional to its time, so a shape twice the work keeps about half the
gain.  One H200 at f2bde68 (2026-12-04) read exactly that for the example's honest
``scalar_scale.patch``: Llama-2-7B down mb4 (16384x4096x11008, 2.0x the work of the
largest target) +2.09% +- 0.25% beside gate_up mb1's +4.27% +- 0.56%, refused as short
of it by the unscaled floor; the same shape read +2.07% beside +3.99% at dd93c80 and
passed by 0.04% (docs/benchmarks.md "Final acceptance on one H200").  Below the
smallest target no scaling is needed: such a saving gains more on a smaller shape.
A change tuned to the targets (the held-out flat) is still short of the scaled floor
where that floor is above the smallest gain the protocol counts (1%): at the far end of
the held-out pick's range (4x the targets' work, ``runner.judge.representative``) when
the neighbour gained more than about 4.1%.

The lesser neighbour, not an interpolation between the two: the demo's speed-up gains
most on the smallest shape (a small M) and on the largest (an N padded to whole
128-blocks) and least in the middle, where the held-out shapes are chosen, so a line
between the neighbours predicts more than an honest change gives there.  A change
tuned to the targets (every target +10%, the held-out flat) is still short of both
neighbours.  Gains are in log space (ln(final / base)).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.core.outcomes import GateResult, Score
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
    scale: float = 1.0  # below 1 beyond the largest target: the floor's work / held's

    @property
    def expected(self) -> float:
        """The least gain an honest change keeps on the held-out shape (log)."""
        return self.floor.gain * self.scale

    @property
    def short(self) -> bool:
        kept = self.held.gain < MIDPOINT * self.expected
        return self.floor.gain > 0 and kept and self.by > self.tolerance

    def describe(self) -> str:
        gap = (
            f"short by {100 * self.by:.2f}%"
            if self.by > 0
            else f"above by {abs(100 * self.by):.2f}%"
        )
        scaled = (
            f", scaled to {100 * math.expm1(self.expected):+.2f}% for its "
            f"{1 / self.scale:.2f}x the work (a fixed saving per call)"
            if self.scale < 1  # only where the neighbour gained
            else ""
        )
        return (
            f"{self.held.pct()} against its neighbour {self.floor.pct()}{scaled} "
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
    beyond = all(t.work < held.work for t in targets) and held.work > 0
    scale = floor.work / held.work if beyond and floor.gain > 0 else 1.0
    noise = math.hypot(floor.half_width * scale, held.half_width)
    by = floor.gain * scale - held.gain
    return Shortfall(held, floor, by, max(noise, FLOOR_GAIN), scale)


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
    reasons = [
        f"{h.pct()} (>= 5% slower)" for h in sorted(held, key=lambda h: h.label) if regressed(h)
    ]
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


def heldout_verdict(
    base: Score,
    final: Score,
    heldout: list[str],
    work: Mapping[str, float],
    gate: GateResult | None = None,
) -> tuple[bool, str] | None:
    """The over-fitting guard on the held-out shapes (never measured by a round,
    docs/protocol.md §5.7, the rule above): a held-out shape established 5% or more
    slower than at the base commit (its whole interval; a reading past -5% inside its
    noise is named, not refused), or one that gains clearly less than the lesser of its
    size neighbours among the targets, is over-fitting.  None without any held-out
    shape; else whether the shapes pass and the words why.  Every shape is judged on
    the full validation's paired mean and 95% interval (the gate's ``evidence``,
    recorded whatever decided); a shape without one fails the check, never judged on a
    tolerance as wide as sigma_G.  Acceptance's check (``acceptance_checks``) and a
    quick round's unannounced-shape guard (``runner.compare.loop.probe_veto``) both
    judge through it."""
    gains, unpaired = shape_gains(base, final, work, gate)
    if not any(lb in heldout for lb in [*(g.label for g in gains), *unpaired]):
        return None
    if unpaired:
        return False, _unpaired_note(unpaired, gate)
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
        return False, why
    near = [s.describe() for h in held if (s := shortfall(h, targets)) is not None]
    return True, "; ".join([detail, *near, *noisy])


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
