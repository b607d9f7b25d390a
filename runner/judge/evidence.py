"""Paired evidence: what the process pairs of a round say, with its uncertainty
(docs/measurement.md §4.2).  Pure functions, no I/O; the gate (``runner.judge.gate``)
decides from them.

A process pair i gives, per shape s, d(i, s) = ln(candidate / incumbent) and its gain
g_i = mean over the gating shapes of d(i, s).  Over n pairs:

* the paired gain m = mean g_i, its spread s = sample stdev g_i and its standard error
  s / sqrt(n); the interval is m +- t * s / sqrt(n), t the two-sided 95% quantile of
  Student's t with n - 1 degrees of freedom (12.7 with 2 pairs, 4.30 with 3, 2.57 with
  6, 2.09 with 21, 1.96 beyond): few pairs give a wide interval, never a false
  certainty;
* the same per shape, from d(i, s);
* a **re-measurement** is a run of k consecutive pairs, its value the mean of their
  g_i.  k is sized from the noise measured so far so that one re-measurement is
  precise next to the gain it has to show: its standard error s / sqrt(k) at most a
  third of max(m, 1%).  The near-noise rule (mean above 1%, stdev below half of it,
  at least 3 re-measurements) judges re-measurements, never single pairs, so its
  "stdev below half the gain" shrinks as pairs are added: a real 1.5-2% gain passes
  once enough pairs are in, an identical candidate does not.

Everything is in log space, so scaling every value of both roles changes nothing, and
sums use ``math.fsum`` (independent of shape and pair order within a sum).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.core.outcomes import IntervalDict, PairSample
from runner.core.stats import stdev

# Two-sided 95% quantiles of Student's t by degrees of freedom (between the listed ones
# the next smaller listed one is used, a slightly wider interval; beyond 120: 1.96).
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    30: 2.042,
    60: 2.000,
    120: 1.980,
}
Z = 1.96  # the normal limit
MIN_REMEASUREMENTS = 3  # the near-noise rule's "at least 3 re-measurements"
PRECISION = 3.0  # a re-measurement's standard error at most max(m, 1%) / PRECISION
FLOOR_GAIN = math.log1p(0.01)  # the near-noise rule's "mean gain above 1%", in log
MAX_REMEASURE_SIZE = 64  # never ask for re-measurements larger than this many pairs


@dataclass(frozen=True)
class Estimate:
    """A mean in log space with its spread over n samples (``spread`` is NaN with
    one sample: nothing is known about the noise yet)."""

    mean: float
    spread: float
    n: int

    @property
    def stderr(self) -> float:
        return self.spread / math.sqrt(self.n) if self.n > 1 else math.inf

    @property
    def half_width(self) -> float:
        """The 95% interval's half-width (infinite with one sample)."""
        return t95(self.n - 1) * self.stderr if self.n > 1 else math.inf

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width

    def pct(self) -> str:
        """'+1.23% +- 0.45%' (the interval's half-width, as a percentage)."""
        half = self.half_width
        width = "?" if not math.isfinite(half) else f"{100 * half:.2f}%"
        return f"{100 * math.expm1(self.mean):+.2f}% \u00b1 {width}"

    def to_dict(self) -> IntervalDict:
        half = self.half_width
        return {
            "mean_pct": 100 * math.expm1(self.mean),
            "half_width_pct": 100 * half if math.isfinite(half) else None,
            "spread_pct": 100 * self.spread if math.isfinite(self.spread) else None,
            "pairs": self.n,
        }


def t95(dof: int) -> float:
    """The two-sided 95% Student-t quantile for ``dof`` degrees of freedom (>= 1)."""
    listed = [d for d in T95 if d <= dof]
    return T95[max(listed)] if dof <= max(T95) else Z


def estimate(values: Sequence[float]) -> Estimate:
    n = len(values)
    spread = stdev(values) if n > 1 else math.nan
    return Estimate(math.fsum(values) / n, spread, n)


@dataclass(frozen=True)
class Evidence:
    """The paired evidence of one round on its gating shapes."""

    gains: tuple[float, ...]  # g_i per pair, in pair order
    gain: Estimate  # over the gains
    shapes: dict[str, Estimate]  # per gating shape, over d(i, s)

    @property
    def n(self) -> int:
        return len(self.gains)

    def remeasure_size(self) -> int:
        """k: the pairs of one re-measurement (at least 1), from the measured noise."""
        if self.n < 2 or not math.isfinite(self.gain.spread):
            return 1
        target = max(self.gain.mean, FLOOR_GAIN) / PRECISION
        k = math.ceil((self.gain.spread / target) ** 2)
        return max(1, min(k, MAX_REMEASURE_SIZE))

    def remeasurements(self, k: int) -> list[float]:
        """The values of the re-measurements: the pairs in pair order cut into
        ``n // k`` runs of (nearly) equal length, each run's mean gain."""
        count = max(self.n // k, 1)
        bounds = [round(j * self.n / count) for j in range(count + 1)]
        runs = [self.gains[a:b] for a, b in itertools.pairwise(bounds)]
        return [math.fsum(run) / len(run) for run in runs]

    def pairs_for_precision(self) -> int:
        """The pairs the near-noise rule needs at the noise measured so far:
        MIN_REMEASUREMENTS re-measurements of ``remeasure_size`` pairs."""
        return MIN_REMEASUREMENTS * self.remeasure_size()

    def summary(self) -> str:
        """'paired gain +1.23% +- 0.45% over 12 pairs (stdev 0.80% a pair)'."""
        spread = self.gain.spread
        per = f"stdev {100 * spread:.2f}% a pair" if math.isfinite(spread) else "one pair"
        return f"paired gain {self.gain.pct()} over {self.n} pairs ({per})"


def gather(pairs: Sequence[PairSample], labels: Sequence[str]) -> Evidence:
    """The evidence of ``pairs`` (already checked to cover ``labels`` with usable
    values) on the gating shapes ``labels``."""
    logs = [{lb: math.log(p.candidate[lb] / p.incumbent[lb]) for lb in labels} for p in pairs]
    gains = tuple(math.fsum(lp[lb] for lb in labels) / len(labels) for lp in logs)
    shapes = {lb: estimate([lp[lb] for lp in logs]) for lb in labels}
    return Evidence(gains, estimate(gains), shapes)


def noise_rule(evidence: Evidence) -> tuple[bool, str]:
    """The near-noise rule on re-measurements: at least MIN_REMEASUREMENTS of them,
    their mean gain above 1% and their stdev below half of it.  Returns (passed,
    the figures it was judged on)."""
    k = evidence.remeasure_size()
    values = evidence.remeasurements(k)
    m = math.fsum(values) / len(values)
    s = stdev(values) if len(values) > 1 else math.inf
    figures = f"{len(values)} re-measurement(s) of {_run_pairs(evidence.n, len(values), k)}"
    if math.isfinite(s):
        figures += f": mean {100 * math.expm1(m):+.2f}%, stdev {100 * s:.2f}%"
    ok = len(values) >= MIN_REMEASUREMENTS and m > FLOOR_GAIN and s < m / 2
    return ok, figures


def _run_pairs(n: int, count: int, k: int) -> str:
    """The pairs in each of ``count`` re-measurements cut from ``n`` pairs, as they are
    (``n // count``, or one more in some), and the ``k`` the noise asks for when the
    pairs measured hold fewer than that."""
    low, high = n // count, -(-n // count)
    size = f"{low} pair(s)" if low == high else f"{low}-{high} pairs"
    return size if k <= n else f"{size} (the noise measured asks for {k} a re-measurement)"
