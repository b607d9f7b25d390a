"""The Current Best and Directions to Try that every round appends to
``logs/optimize.md`` after its history entry (docs/protocol.md §6.3), as upstream's
VALIDATE step asks ("update `logs/optimize.md` (optimization history, current best,
directions to try)", ``agent/skills/kernel-optimize/workflow/optimize-loop.md``,
Primus-Turbo a6a16cdc) in the headings and fields of its optimization log template.
The log is append-only, so each round appends its own copy: the last one is the state
of the campaign."""

from __future__ import annotations

from collections.abc import Sequence

from runner.core.outcomes import RoundResult
from runner.render.final_report import brief, inconclusive, ineffective_rows
from runner.render.markdown import render_current_best, render_directions
from runner.render.status import best_round, escalation_step
from runner.render.termination import consecutive_rollbacks


def directions_to_try(results: Sequence[RoundResult]) -> list[str]:
    """The open directions after the last of ``results``: its next direction, the
    escalation step due after rollbacks in a row (docs/protocol.md §7.1), and each
    inconclusive rollback, which is not shown ineffective and may be measured again."""
    if not results:
        return []
    last = max(results, key=lambda r: r.round)
    out = [f"{last.next_direction} (from round-{last.round})"] if last.next_direction else []
    esc = escalation_step(consecutive_rollbacks(results))
    if esc is not None:
        out.append(f"escalation step {esc[0]}: {esc[1]}")
    out += [
        f"{brief(r)}: inconclusive in round-{r.round}; measure it again with more pairs"
        for r in results
        if inconclusive(r)
    ]
    return out


def render_round_state(results: Sequence[RoundResult]) -> str:
    """``## Current Best`` (the best round against the baseline) and the directions,
    for the end of the last round's entry; empty before there is a best."""
    best = best_round(results)
    if best is None:
        return ""
    current = render_current_best(best.baseline, best.score, best.round)
    return current + render_directions(directions_to_try(results), ineffective_rows(results))
