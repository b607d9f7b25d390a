"""A round's records and the corrections of ``campaign correct``: rendered by
``runner.render`` (which only returns text), written by ``runner.store.record_writer`` (which
only writes it, under the campaign lock).  Rounds, the baseline and the CLI close and
correct through here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.core.errors import ConfigError
from runner.core.outcomes import RoundResult
from runner.core.step_times import StepTimes
from runner.core.timestamps import now_minute
from runner.render.markdown import (
    render_history_entry,
    render_optimize_header,
    render_trend_correction,
    render_trend_row,
)
from runner.render.round_state import render_round_state
from runner.render.summary import render_summary
from runner.store.campaign import Campaign
from runner.store.record_writer import RoundTexts, append_log_correction, write_round_records


def close_round(
    campaign: Campaign,
    result: RoundResult,
    progress: Callable[[str], None] | None = None,
    times: StepTimes | None = None,
) -> None:
    """Render the round's records and write them: summary.md, both log entries (the
    history entry followed by the Current Best and Directions after this round) and,
    last, result.json (``runner.store.record_writer.write_round_records``).  ``times``:
    the round's steps, recorded in the result (its records' rendering the last)."""
    if times is not None:
        with times.step("records"):
            result.step_times = times.finish()  # the summary shows the largest
            texts = _texts(campaign, result)
        result.step_times = times.finish()
    else:
        texts = _texts(campaign, result)
    write_round_records(campaign, result, texts, progress)


def _texts(campaign: Campaign, result: RoundResult) -> RoundTexts:
    m = campaign.manifest
    so_far = [*(r for r in campaign.results() if r.round != result.round), result]
    return RoundTexts(
        summary=render_summary(result, m),
        history_entry=render_history_entry(result) + render_round_state(so_far),
        trend_row=render_trend_row(result),
        optimize_header=render_optimize_header(m, result) if result.round == 1 else None,
    )


def correct_logs(
    campaign: Campaign, text: str, *, round_n: int | None = None, trend: bool = False
) -> Path:
    """``campaign correct``: a correction appended to optimize.md, or with ``trend`` a
    correction row for round ``round_n`` to the trend table; returns the log written."""
    if not trend:
        return append_log_correction(campaign, text, round_n=round_n)
    if round_n is None:
        raise ConfigError("a trend-table correction is about one round: pass --round N")
    row = render_trend_correction(round_n, " ".join(text.split()), now_minute())
    return append_log_correction(campaign, text, round_n=round_n, trend_row=row)
