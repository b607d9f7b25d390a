"""The chain of kept rounds (docs/protocol.md §6): across the BASELINE and ACCEPTED
rounds in order, the primary aggregate never drops by more than 1%.  ``campaign status``
reports a broken chain; it is read from the recorded results and writes nothing."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise

from runner.core.outcomes import RoundResult, Status
from runner.render.figures import fmt_num
from runner.render.markdown import aggregate_over, passing

CHAIN_TOLERANCE_PCT = 1.0


def check_chain(results: Sequence[RoundResult]) -> list[str]:
    """Across BASELINE+ACCEPTED rounds in order, the primary aggregate (over the shapes
    both passed) never drops by more than 1%; returns the violations.  An accepted
    round is held against the incumbent measured beside it in that round (``best``),
    when it recorded one: the absolute figures of two rounds measured at different
    times move with the machine's load (the demo's accepted speed-up read 5% below the
    baseline's figures on a loaded CI machine, while paired against its incumbent it
    read +6.5%), and a chain is broken by what a round measured, not by when."""
    kept = sorted(
        (r for r in results if r.status in (Status.BASELINE, Status.ACCEPTED)),
        key=lambda r: r.round,
    )
    problems = [
        f"round-{r.round} is {r.status.value} but {r.score.n_fail} shape(s) FAILed"
        for r in kept
        if r.score.n_fail
    ]
    for prev, cur in pairwise(kept):
        against = cur.best if cur.best is not None and cur.best.metric == cur.score.metric else None
        ref, ref_round = (against, cur.round) if against is not None else (prev.score, prev.round)
        shared = {s.label for s in passing(ref)} & {s.label for s in passing(cur.score)}
        before, after = aggregate_over(ref, shared), aggregate_over(cur.score, shared)
        if before is None or after is None:
            continue
        drop = (1.0 - after / before) * 100.0
        if drop > CHAIN_TOLERANCE_PCT:
            problems.append(
                f"round-{cur.round} ({cur.status.value}) {cur.score.metric} geomean "
                f"{fmt_num(after)} is {drop:.3f}% below "
                + (
                    f"its incumbent ({fmt_num(before)}) measured beside it"
                    if against is not None
                    else f"round-{ref_round} ({fmt_num(before)})"
                )
                + " on "
                f"{len(shared)} shared shapes; the chain may drop at most "
                f"{CHAIN_TOLERANCE_PCT:g}%: re-measure both rounds and append a correction "
                "if a round was wrongly accepted"
            )
    return problems
