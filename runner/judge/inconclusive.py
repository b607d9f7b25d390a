"""Whether a verdict that accepted nothing was too noisy to tell (docs/measurement.md
§4.5): a pure reading of a recorded ``GateResult``, not a gate rule (the verdict
stands; this says what it is).

A verdict is **inconclusive** when the gate accepted nothing and its paired evidence
cannot tell a gain worth accepting from none: the 95% interval of the paired gain
reaches the direct-accept floor (``MIN_THRESHOLD``, 2%: a gain the gate takes at once
on a quiet machine) and no gating shape's whole interval lies at or below a 5%
regression, nor did every pair read a slow-down beyond the threshold (the gate's early
rule: a clear slow-down is a finding, whatever the interval's width).  Then the interval
was wider than the effect the round could detect, and the rollback says nothing about
the change: a busy machine (other work, a loaded 2-core CPU) widens both the interval
and, through the baseline's sigma_G, the threshold (3 sigma_G).

The demo's speed-up on a busy 2-core machine read +5.88% +- 5.87% over 12 pairs (from
-0.16% to +12.28%) against a 27.9% threshold (sigma_G 9.3%): inconclusive.  A real
slow-down (-23%, its interval far below 2%) or an A/A on a quiet machine (+0.1% +- 0.5%)
is not.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from runner.core.outcomes import GateResult
from runner.judge.gate import MIN_THRESHOLD, SEVERE_LOG


@dataclass(frozen=True)
class Inconclusive:
    """The figures of an inconclusive verdict, in percent."""

    mean_pct: float
    low_pct: float
    high_pct: float
    half_width_pct: float
    pairs: int
    spread_pct: float | None  # the stdev of one pair's gain
    threshold_pct: float | None  # the acceptance threshold in force

    @property
    def sigma_g_pct(self) -> float | None:
        """The baseline's sigma_G behind the threshold, when it set it (T = 3 sigma_G
        above the 2% floor)."""
        t = self.threshold_pct
        return t / 3 if t is not None and t > 100 * MIN_THRESHOLD + 1e-9 else None

    def figures(self) -> str:
        """'the paired gain +5.88% +- 5.87% over 12 pairs (...) lies anywhere from
        -0.16% to +12.28%, ...', and the threshold when sigma_G set it."""
        per = f", stdev {self.spread_pct:.2f}% a pair" if self.spread_pct is not None else ""
        text = (
            f"the paired gain {self.mean_pct:+.2f}% \u00b1 {self.half_width_pct:.2f}% over "
            f"{self.pairs} pairs{per} lies anywhere from {self.low_pct:+.2f}% to "
            f"{self.high_pct:+.2f}%, which holds both no gain and gains of "
            f"{100 * MIN_THRESHOLD:.0f}% or more"
        )
        sigma = self.sigma_g_pct
        if sigma is not None:
            text += (
                f"; the baseline's noise (sigma_G {sigma:.2f}%) set the acceptance threshold "
                f"to {self.threshold_pct:.2f}% (3 sigma_G; the floor is "
                f"{100 * MIN_THRESHOLD:.0f}%)"
            )
        return text

    def line(self) -> str:
        """One sentence: what the verdict is, with its figures."""
        return (
            "inconclusive, not shown to be no gain: the measurement was too noisy to tell "
            f"({self.figures()})"
        )


def advice(round_n: int | None = None) -> str:
    """What to do about an inconclusive verdict (of round ``round_n``)."""
    again = f"`campaign validate --round {round_n} ...`" if round_n else "`campaign validate`"
    return (
        "the machine was busy or noisy: close other work on it, then run "
        f"{again} again with the same change and more pairs (`--pairs 12`), or later "
        "when the machine is quieter"
    )


def inconclusive(gate: GateResult | None) -> Inconclusive | None:
    """The figures when ``gate`` accepted nothing and was too noisy to tell (see the
    module docstring); None otherwise (accepted, no paired evidence, one pair, the
    interval clear of the 2% floor, every pair a slow-down beyond the threshold, or a
    gating shape clearly 5% slower)."""
    if gate is None or gate.decision.accepted or not gate.evidence:
        return None
    threshold = gate.threshold_pct if gate.threshold_pct is not None else 100 * MIN_THRESHOLD
    if gate.pair_gains_pct and max(gate.pair_gains_pct) <= -threshold:
        return None  # every pair a slow-down beyond the threshold: the gate's clear case
    gain = gate.evidence.gain
    half = gain.half_width_pct
    if half is None or not math.isfinite(half) or gain.pairs < 2:
        return None
    for shape in gate.evidence.shapes.values():
        s_half = shape.half_width_pct
        if s_half is not None and _log(shape.mean_pct) + s_half / 100 <= -SEVERE_LOG:
            return None
    centre = _log(gain.mean_pct)
    low, high = (100 * math.expm1(centre + k * half / 100) for k in (-1, 1))
    if high < 100 * MIN_THRESHOLD:
        return None
    return Inconclusive(
        mean_pct=gain.mean_pct,
        low_pct=low,
        high_pct=high,
        half_width_pct=half,
        pairs=gain.pairs,
        spread_pct=gain.spread_pct,
        threshold_pct=gate.threshold_pct,
    )


def _log(pct: float) -> float:
    """ln(1 + pct/100): a gain in percent as the gate's log ratio."""
    return math.log1p(pct / 100)
