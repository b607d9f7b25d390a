"""The termination check as a step of the loop (docs/protocol.md §7.2; upstream's
optimize-loop.md TERMINATION_CHECK, checked at Primus-Turbo a6a16cdc): after every
round `campaign status` and the round's output show each condition, met or not, with
its figures; `campaign report` and `campaign accept` say when none holds, and the
report appends the block to ``logs/optimize.md`` in upstream's form
(``### Termination Check``, ✅/❌ per condition, ``-> Satisfied condition(s)``).

T1 the performance target, T2 the share of the hardware peak (where the peak is
known), T3 ``max_iterations``, T4 the user's stop.  Rollbacks in a row and the other
stagnation triggers (``runner.render.stagnation``) are shown beside them: upstream makes
them a trigger for a stagnation review, not a reason to stop.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.core.op_info import op_info
from runner.core.outcomes import RoundResult, Score, Status
from runner.core.stats import geomean
from runner.judge.peaks import peak_for
from runner.render.markdown import termination_checks
from runner.render.stagnation import jitter_trigger
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest
from runner.store.roundfiles import candidate_patches

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
    stagnation: tuple[str, ...] = ()  # other triggers of a stagnation review

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
        review = [f"stagnation review due (not a stop): {t}" for t in self.stagnation]
        verdict = f"verdict: {self.verdict()}"
        return [*(text for _, text in self.checks), stagnation, *review, verdict]

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
    patches: Mapping[int, str] | None = None,
) -> TerminationCheck:
    """T1-T4 for ``results``; T2 from ``final`` (default: the best round's score);
    ``patches`` (round -> candidate.patch): the parameter-jitter trigger."""
    if final is None:
        kept = [r for r in results if r.status.value in ("BASELINE", "ACCEPTED")]
        final = max(kept, key=lambda r: r.round).score if kept else None
    peak, _ = peak_info(manifest)
    fraction = peak_fraction(final, peak) if final is not None else None
    checks = termination_checks(
        manifest, results, peak_fraction=fraction, peak_goal=PEAK_GOAL, user_stop=user_stop
    )
    validated = [r.round for r in sorted(results, key=lambda r: r.round) if r.round >= 2]
    jitter = jitter_trigger(validated, patches or {})
    return TerminationCheck(tuple(checks), rollbacks, (jitter,) if jitter else ())


def campaign_termination(
    campaign: Campaign,
    results: Sequence[RoundResult],
    *,
    final: Score | None = None,
    user_stop: bool = False,
) -> TerminationCheck:
    """``termination_check`` of ``campaign`` with its rollbacks in a row and its rounds'
    patches: what ``status``, ``validate``, ``report`` and ``accept`` show."""
    return termination_check(
        campaign.manifest,
        results,
        consecutive_rollbacks(results),
        final=final,
        user_stop=user_stop,
        patches=candidate_patches(campaign),
    )


def consecutive_rollbacks(results: Sequence[RoundResult]) -> int:
    """Rounds ROLLED BACK or FAILED since the last BASELINE/ACCEPTED round; the rounds
    of a tournament that had a winner are not counted (they were judged beside it, not
    after it: docs/protocol.md §1.5)."""
    count = 0
    for r in sorted(results, key=lambda r: r.round, reverse=True):
        if r.status in (Status.BASELINE, Status.ACCEPTED):
            break
        if r.tournament is None or r.tournament.winner is None:
            count += 1
    return count
