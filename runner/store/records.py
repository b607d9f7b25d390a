"""The records of a round (docs/protocol.md §6): closing a round, checking the chain and
appending corrections (``campaign correct``).  The renderers live in
``runner.render.summary`` (summary.md) and ``runner.render.markdown`` (optimize.md,
performance_trend.md) and are re-exported here.

``close_round`` writes, in this order: ``summary.md`` (rewritten while the round is
not closed), the optimize.md entries, the trend row, and ``result.json`` last.  If it
is interrupted, running it again closes the round without duplicating a log entry:
before each append it looks for the round's marker line in that log
(``### round-N — `` in optimize.md, ``| round-N |`` in the trend table).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import pairwise
from pathlib import Path

from runner.core.errors import ConfigError
from runner.core.outcomes import RoundResult, Status
from runner.core.pause_points import pause_point
from runner.core.timestamps import now_minute
from runner.render.figures import fmt_num
from runner.render.markdown import (
    BASELINE_MARKER,
    TREND_HEADER,
    TREND_SEPARATOR,
    aggregate_over,
    history_marker,
    optimize_title,
    passing,
    render_current_best,
    render_directions,
    render_final_sections,
    render_history_entry,
    render_optimize_header,
    render_termination_check,
    render_trend_correction,
    render_trend_row,
    trend_header,
    trend_marker,
)
from runner.render.summary import SECTIONS, render_summary
from runner.store.appendlog import append, append_correction, verify, write_atomic
from runner.store.campaign import Campaign
from runner.store.guard import verify_records
from runner.store.leftovers import ATTEMPT

__all__ = [
    "SECTIONS",
    "TREND_HEADER",
    "TREND_SEPARATOR",
    "append_log_correction",
    "append_trend_correction",
    "check_chain",
    "close_round",
    "render_current_best",
    "render_directions",
    "render_final_sections",
    "render_history_entry",
    "render_optimize_header",
    "render_summary",
    "render_termination_check",
    "render_trend_row",
]

CHAIN_TOLERANCE_PCT = 1.0


def _check_closable(campaign: Campaign, result: RoundResult) -> None:
    n = result.round
    if campaign.result_path(n).exists():
        raise ConfigError(
            f"round {n} of {campaign.name} is already closed; its records are append-only: "
            "append a correction to the logs instead of closing it again"
        )
    expected = campaign.next_round()
    if n != expected:
        raise ConfigError(
            f"cannot close round {n}: the next round of {campaign.name} is round {expected} "
            "(rounds close in order and numbers are never reused)"
        )
    if (n == 1) != (result.status == Status.BASELINE):
        raise ConfigError(
            f"round {n} has status {result.status.value}; round-1 and only round-1 is the "
            "BASELINE: fix the round's status"
        )
    if not campaign.snapshot_dir(n).is_dir():
        raise ConfigError(
            f"{campaign.snapshot_dir(n)} is missing; snapshot the kernel (every round, "
            "accepted or not) before closing the round"
        )


def _has_line(path: Path, prefix: str) -> bool:
    return any(line.startswith(prefix) for line in path.read_text("utf-8").splitlines())


def _append_logs(campaign: Campaign, result: RoundResult) -> None:
    m, n = campaign.manifest, result.round
    opt_head, trend_head = optimize_title(m), trend_header(m)
    verify(campaign.optimize_log, expected_prefix=opt_head)
    verify(campaign.trend_log, expected_prefix=trend_head)
    if n == 1 and not _has_line(campaign.optimize_log, BASELINE_MARKER):
        append(campaign.optimize_log, render_optimize_header(m, result), expected_prefix=opt_head)
    if not _has_line(campaign.optimize_log, history_marker(n)):
        append(campaign.optimize_log, render_history_entry(result), expected_prefix=opt_head)
    pause_point("logs")
    if not _has_line(campaign.trend_log, trend_marker(n)):
        append(campaign.trend_log, render_trend_row(result), expected_prefix=trend_head)


def close_round(
    campaign: Campaign, result: RoundResult, progress: Callable[[str], None] | None = None
) -> None:
    """Write summary.md, both log entries and, last, result.json (under the lock)."""
    with campaign.lock():
        _check_closable(campaign, result)
        if progress is not None:
            progress("records")
        write_atomic(campaign.summary_path(result.round), render_summary(result, campaign.manifest))
        _append_logs(campaign, result)
        pause_point("records")
        campaign.save_result(result)
        (campaign.round_dir(result.round) / ATTEMPT).unlink(missing_ok=True)


def append_trend_correction(campaign: Campaign, n: int, note: str) -> None:
    """Correct round-N's trend row by appending a correction row (never an edit)."""
    if n not in campaign.closed_rounds():
        raise ConfigError(f"round {n} of {campaign.name} is not closed; nothing to correct")
    when = now_minute()
    with campaign.lock():
        append(
            campaign.trend_log,
            render_trend_correction(n, note, when),
            expected_prefix=trend_header(campaign.manifest),
        )


def append_log_correction(
    campaign: Campaign, text: str, *, round_n: int | None = None, trend: bool = False
) -> Path:
    """``campaign correct``: append a correction (``appendlog.append_correction``) to
    optimize.md, or with ``trend`` a correction row for round ``round_n`` to the trend
    table.  Under the campaign lock, after every record verifies (a broken one is exit
    5: restore it first).  Returns the log written."""
    if not text.strip():
        raise ConfigError("the correction is empty: say what was wrong with --text TEXT")
    if trend and round_n is None:
        raise ConfigError("a trend-table correction is about one round: pass --round N")
    if round_n is not None and round_n not in campaign.closed_rounds():
        raise ConfigError(
            f"round {round_n} of {campaign.name} is not closed; only a closed round's "
            "entries can be corrected"
        )
    with campaign.lock():
        verify_records(campaign)
        if trend:
            assert round_n is not None
            append_trend_correction(campaign, round_n, " ".join(text.split()))
            return campaign.trend_log
        about = f"round-{round_n}: " if round_n is not None else ""
        append_correction(campaign.optimize_log, about + text)
    return campaign.optimize_log


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
