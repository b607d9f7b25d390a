"""The headline gain of a campaign, defined once (docs/protocol.md §7.4) and shown the
same way by ``campaign status``, the final report (its rounds chart chains the same
ratios) and the MCP tool ``campaign_status``.

The headline gain is the accepted rounds' paired gate gains compounded: for each
ACCEPTED round, the gain the gate judged it on against its incumbent, measured in the
same round (``GateResult.delta_pct``, recorded as the transfer check's benchmark gain),
and ``prod(1 + g_i) - 1`` over them.  Machine drift between rounds does not enter it;
the best round's own geomean against the baseline's, measured hours apart, would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from runner.core.outcomes import RoundResult, Status
from runner.render.figures import fmt_pct

CITE = "docs/protocol.md §7.4"


def compound(pcts: Sequence[float]) -> float:
    """``prod(1 + p/100) - 1`` in percent."""
    return (math.prod(1 + p / 100 for p in pcts) - 1) * 100


def round_gain(r: RoundResult) -> float:
    """The paired gain one round was judged on, in percent (0 without a gate verdict)."""
    if r.transfer.benchmark_gain_pct is not None:
        return r.transfer.benchmark_gain_pct
    return r.gate.delta_pct if r.gate is not None else 0.0


@dataclass(frozen=True)
class Headline:
    pct: float
    rounds: tuple[int, ...]  # the accepted rounds it compounds, oldest first

    @property
    def pct_or_none(self) -> float | None:
        """None before any round was accepted (nothing to claim yet)."""
        return self.pct if self.rounds else None

    def describe(self) -> str:
        """``+12.841% over the baseline (the paired gate gains of round-3 compounded;
        docs/protocol.md §7.4)``."""
        if not self.rounds:
            return f"{fmt_pct(0.0)}: no round accepted yet ({CITE})"
        names = ", ".join(f"round-{n}" for n in self.rounds)
        how = f"the paired gate gains of {names} compounded"
        return f"{fmt_pct(self.pct)} over the baseline ({how}; {CITE})"


def headline_gain(results: Sequence[RoundResult]) -> Headline:
    accepted = sorted((r for r in results if r.status is Status.ACCEPTED), key=lambda r: r.round)
    return Headline(compound([round_gain(r) for r in accepted]), tuple(r.round for r in accepted))
