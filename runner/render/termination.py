"""The termination check as a step of the loop (docs/protocol.md §7.2; upstream's
optimize-loop.md TERMINATION_CHECK, checked at Primus-Turbo a6a16cdc): after every
round `campaign status` and the round's output show each condition, met or not, with
its figures; `campaign report` and `campaign accept` say when none holds, and the
report appends the block to ``logs/optimize.md`` in upstream's form
(``### Termination Check``, ✅/❌ per condition, ``-> Satisfied condition(s)``).

T1 the performance target, T2 the share of the hardware peak (where the peak is
known), T3 ``max_iterations``, T4 the user's stop.  Rollbacks in a row are shown beside
them: upstream makes them a trigger for a stagnation review, not a reason to stop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runner.core.outcomes import RoundResult, Score
from runner.core.stats import geomean
from runner.judge.peaks import peak_for
from runner.ops.info import op_info
from runner.render.markdown import termination_checks
from runner.store.manifest import Manifest

PEAK_GOAL = 0.8  # T2: an acceptable share of the hardware peak
UPSTREAM_NAMES = {
    "T1": "performance_target",
    "T2": "hardware efficiency",
    "T3": "max_iterations reached",
    "T4": "user requested stop",
}


def peak_info(m: Manifest) -> tuple[float | None, str]:
    """(peak for the primary metric on the campaign's GPU, the dtype looked up)."""
    dtype = "hbm" if "GB/s" in m.primary_metric else op_info(m.target_op).precision
    return peak_for(m.target_gpu, dtype), dtype


def peak_fraction(final: Score, peak: float | None) -> float | None:
    vals = [s.value / peak for s in final.shapes if s.value and peak]
    return geomean(vals) if vals else None


@dataclass(frozen=True)
class TerminationCheck:
    checks: tuple[tuple[bool, str], ...]  # T1-T4 in order: (met, the line with figures)
    rollbacks: int  # in a row since the last accepted round

    @property
    def held(self) -> list[str]:
        return [f"T{i}" for i, (ok, _) in enumerate(self.checks, 1) if ok]

    def verdict(self) -> str:
        if self.held:
            return f"the campaign may end ({', '.join(self.held)} holds)"
        return "none of T1-T4 holds: the campaign may NOT end yet; return to ANALYZE"

    def lines(self) -> list[str]:
        stagnation = f"rollbacks in a row: {self.rollbacks}" + (
            " (a stagnation review is due, not a stop)" if self.rollbacks >= 2 else ""
        )
        return [*(text for _, text in self.checks), stagnation, f"verdict: {self.verdict()}"]

    def upstream_block(self) -> str:
        """The block as upstream's optimize-loop.md writes it into logs/optimize.md."""
        rows = [
            f"- T{i} {UPSTREAM_NAMES[f'T{i}']}: {'✅' if ok else '❌'} ({text})"
            for i, (ok, text) in enumerate(self.checks, 1)
        ]
        held = ", ".join(self.held) or "none"
        body = "\n".join(rows)
        return f"\n### Termination Check\n\n{body}\n-> Satisfied condition(s): {held}\n"


def termination_check(
    manifest: Manifest,
    results: Sequence[RoundResult],
    rollbacks: int,
    *,
    final: Score | None = None,
    user_stop: bool = False,
) -> TerminationCheck:
    """T1-T4 for ``results``; T2 from ``final`` (default: the best round's score)."""
    if final is None:
        kept = [r for r in results if r.status.value in ("BASELINE", "ACCEPTED")]
        final = max(kept, key=lambda r: r.round).score if kept else None
    peak, _ = peak_info(manifest)
    fraction = peak_fraction(final, peak) if final is not None else None
    checks = termination_checks(
        manifest, results, peak_fraction=fraction, peak_goal=PEAK_GOAL, user_stop=user_stop
    )
    return TerminationCheck(tuple(checks), rollbacks)
