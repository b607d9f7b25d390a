"""The records of a round (docs/protocol.md §6): closing a round and appending
corrections (``campaign correct``), under the campaign lock.  The text comes rendered
(``runner.render.summary``, ``runner.render.markdown``; ``runner.round.logs`` puts the
two together): this module only writes it.

``write_round_records`` writes, in this order: ``summary.md`` (rewritten while the round
is not closed), the optimize.md entries, the trend row, and ``result.json`` last.  If it
is interrupted, running it again closes the round without duplicating a log entry:
before each append it looks for the round's marker line in that log
(``### round-N — `` in optimize.md, ``| round-N |`` in the trend table).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import ConfigError, RoundOutOfOrder
from runner.core.files import write_atomic
from runner.core.limits import MAX_NOTE_CHARS, check_size
from runner.core.outcomes import RoundResult, Status
from runner.core.pause_points import pause_point
from runner.store.appendlog import append, append_correction, verify
from runner.store.campaign import Campaign
from runner.store.guard import verify_records
from runner.store.leftovers import ATTEMPT
from runner.store.log_format import (
    BASELINE_MARKER,
    TERMINATION_MARKER,
    history_marker,
    optimize_title,
    trend_header,
    trend_marker,
)


@dataclass(frozen=True)
class RoundTexts:
    """A round's records as rendered: ``optimize_header`` (the basic information and
    the baseline table) at round-1 only."""

    summary: str
    history_entry: str
    trend_row: str
    optimize_header: str | None = None


def _check_closable(campaign: Campaign, result: RoundResult) -> None:
    n = result.round
    if campaign.result_path(n).exists():
        raise RoundOutOfOrder(
            f"round {n} of {campaign.name} is already closed; its records are append-only: "
            "append a correction to the logs instead of closing it again"
        )
    expected = campaign.next_round()
    if n != expected:
        raise RoundOutOfOrder(
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


def _append_logs(campaign: Campaign, n: int, texts: RoundTexts) -> None:
    m = campaign.manifest
    opt_head, trend_head = optimize_title(m), trend_header(m)
    verify(campaign.optimize_log, expected_prefix=opt_head)
    verify(campaign.trend_log, expected_prefix=trend_head)
    header = texts.optimize_header
    if n == 1 and header is not None and not _has_line(campaign.optimize_log, BASELINE_MARKER):
        append(campaign.optimize_log, header, expected_prefix=opt_head)
    if not _has_line(campaign.optimize_log, history_marker(n)):
        append(campaign.optimize_log, texts.history_entry, expected_prefix=opt_head)
    pause_point("logs")
    if not _has_line(campaign.trend_log, trend_marker(n)):
        append(campaign.trend_log, texts.trend_row, expected_prefix=trend_head)


def write_round_records(
    campaign: Campaign,
    result: RoundResult,
    texts: RoundTexts,
    progress: Callable[[str], None] | None = None,
) -> None:
    """Write summary.md, both log entries and, last, result.json (under the lock)."""
    with campaign.lock():
        _check_closable(campaign, result)
        if progress is not None:
            progress("records")
        write_atomic(campaign.summary_path(result.round), texts.summary)
        _append_logs(campaign, result.round, texts)
        pause_point("records")
        campaign.save_result(result)
        (campaign.round_dir(result.round) / ATTEMPT).unlink(missing_ok=True)


def append_final_report(campaign: Campaign, text: str) -> bool:
    """Append the Termination Check and the Final Report (``text``) to the end of
    optimize.md, once: False when the block already follows the last round's entry
    (a later round, then a later end, appends again)."""
    head = optimize_title(campaign.manifest)
    verify(campaign.optimize_log, expected_prefix=head)
    data = campaign.optimize_log.read_text("utf-8")
    closed = campaign.closed_rounds()
    at = data.rfind("\n" + history_marker(max(closed))) if closed else 0
    if "\n" + TERMINATION_MARKER + "\n" in data[max(at, 0) :]:
        return False
    append(campaign.optimize_log, text, expected_prefix=head)
    return True


def append_log_correction(
    campaign: Campaign, text: str, *, round_n: int | None = None, trend_row: str | None = None
) -> Path:
    """``campaign correct``: append a correction (``appendlog.append_correction``) to
    optimize.md, or ``trend_row`` (round ``round_n``'s correction row, rendered) to the
    trend table.  Under the campaign lock, after every record verifies (a broken one is
    exit 5: restore it first).  Returns the log written."""
    if not text.strip():
        raise ConfigError("the correction is empty: say what was wrong with --text TEXT")
    check_size(text, MAX_NOTE_CHARS, "the correction", "say what was wrong in a few sentences")
    if round_n is not None and round_n not in campaign.closed_rounds():
        raise RoundOutOfOrder(
            f"round {round_n} of {campaign.name} is not closed; only a closed round's "
            "entries can be corrected"
        )
    with campaign.lock():
        verify_records(campaign)
        if trend_row is not None:
            append(campaign.trend_log, trend_row, expected_prefix=trend_header(campaign.manifest))
            return campaign.trend_log
        about = f"round-{round_n}: " if round_n is not None else ""
        append_correction(campaign.optimize_log, about + text)
    return campaign.optimize_log
