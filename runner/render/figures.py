"""How every metric figure and gain is written, in the terminal, summary.md, the logs and
the report: the one place for number formatting.

* ``fmt_num``: at least 3 significant digits (3 decimals from 1 up, more below: a CPU
  round's 0.00312 TFLOPS never prints as ``0.003``); ``-`` for a missing number.
* ``scale_for``: the unit a set of values reads best in: TFLOPS on a GPU, GFLOPS or
  MFLOPS when the values are small (a CPU campaign); GB/s, MB/s or KB/s for the
  memory-bound metric.  One scale per table or line, so that figures compare at a glance.
* ``fmt_pct``: a change in percent, 3 decimals and a sign.
* ``fmt_gain``: a gain with the spread of the paired evidence behind it when the gate
  was given interleaved pairs: ``+2.345% ± 0.41% (5 pairs)``, where ± is the half-width
  of the 95% interval of the paired gain (``GateResult.evidence``, as the gate judged
  it; from the per-pair gains ``pair_gains_pct`` with the same Student-t rule when a
  record has no evidence).
* ``short_text``: the first line of a text (a hypothesis) cut at a word boundary, with
  an ellipsis, never mid-word.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from runner.core.outcomes import GateResult, Score
from runner.core.stats import stdev
from runner.judge.evidence import t95
from runner.render.escape import printable

DASH = "—"
# (unit, factor from the metric's own unit), largest first, per unit family
_FLOPS = (("TFLOPS", 1.0), ("GFLOPS", 1e3), ("MFLOPS", 1e6))
_BYTES = (("GB/s", 1.0), ("MB/s", 1e3), ("KB/s", 1e6))
SIGNIFICANT = 3


def valid(x: float | None) -> bool:
    return x is not None and not math.isnan(x)


def fmt_num(x: float | None) -> str:
    """At least 3 significant digits (3 decimals for 1 and above); ``-`` when missing."""
    if x is None or not valid(x):
        return "-"
    if x == 0 or math.isinf(x):
        return f"{x:.3f}"
    decimals = max(3, SIGNIFICANT - 1 - math.floor(math.log10(abs(x))))
    return f"{x:.{min(decimals, 12)}f}"


def unit_of(metric: str) -> str:
    """The unit a metric is recorded in (its CSV column's)."""
    return "GB/s" if "GB/s" in metric else "TFLOPS"


@dataclass(frozen=True)
class Scale:
    """Values of ``base`` unit shown in ``unit`` (each multiplied by ``factor``)."""

    base: str
    unit: str
    factor: float = 1.0

    def num(self, x: float | None) -> str:
        return fmt_num(x * self.factor if x is not None else None)

    def value(self, x: float | None) -> str:
        """The figure with its unit, ``3.120 GFLOPS``; ``-`` when missing."""
        text = self.num(x)
        return text if text == "-" else f"{text} {self.unit}"

    def label(self, metric: str) -> str:
        """The metric's name in this unit: ``Forward TFLOPS`` -> ``Forward GFLOPS``."""
        return metric.replace(self.base, self.unit) if self.base in metric else metric


def scale_for(metric: str, values: Iterable[float | None]) -> Scale:
    """The largest unit in which the largest of ``values`` is at least 1."""
    base = unit_of(metric)
    family = _BYTES if base == "GB/s" else _FLOPS
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    top = max(finite, default=1.0)
    for unit, factor in family:
        if top * factor >= 1:
            return Scale(base, unit, factor)
    unit, factor = family[-1]
    return Scale(base, unit, factor)


def score_scale(metric: str, *scores: Score | None) -> Scale:
    """One scale for the tables of ``scores``: the primary metric and the forward and
    backward figures of every shape."""
    values = [
        v
        for sc in scores
        if sc is not None
        for s in sc.shapes
        for v in (s.value, s.forward, s.backward)
    ]
    return scale_for(metric, values)


def fmt_metric(x: float | None, metric: str) -> str:
    """One figure of ``metric`` in the unit that suits its size."""
    return scale_for(metric, [x]).value(x)


def fmt_pct(p: float | None) -> str:
    """``+1.234%`` / ``-1.234%``; ``—`` when undefined."""
    if p is None:
        return DASH
    p = round(p, 3)
    return f"{p:+.3f}%" if p != 0 else "+0.000%"


Evidence = GateResult | Sequence[float] | None  # a verdict, or its per-pair gains (percent)


def pair_spread(evidence: Evidence) -> tuple[float, int] | None:
    """(the 95% interval's half-width of the paired gain in percent, pairs) when at
    least two interleaved pairs were recorded; None otherwise."""
    if isinstance(evidence, GateResult):
        gain = evidence.evidence.gain if evidence.evidence else None
        if gain is not None and gain.half_width_pct is not None:
            return gain.half_width_pct, gain.pairs
        evidence = evidence.pair_gains_pct
    logs = [math.log1p(g / 100) for g in evidence or ()]  # as the gate computes it
    if len(logs) < 2:
        return None
    return 100 * t95(len(logs) - 1) * stdev(logs) / math.sqrt(len(logs)), len(logs)


def fmt_gain(delta_pct: float | None, evidence: Evidence = None) -> str:
    """A gain, with ``± x.xx% (n pairs)`` from the paired evidence when recorded."""
    spread = pair_spread(evidence)
    if delta_pct is None or spread is None:
        return fmt_pct(delta_pct)
    sd, n = spread
    return f"{fmt_pct(delta_pct)} ± {sd:.2f}% ({n} pairs)"


def short_text(text: str, width: int = 60) -> str:
    """The first line, cut at a word boundary with an ellipsis when too long; control
    characters made visible (``runner.render.escape.printable``: it goes to terminals)."""
    first = text.strip().splitlines()[0] if text.strip() else DASH
    line = printable(" ".join(first.split()), keep_newlines=False)
    if len(line) <= width:
        return line
    cut = line[: width - 1].rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:(") + "…"
