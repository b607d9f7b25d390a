"""``campaign correct``: a correction appended to the logs."""

from __future__ import annotations

import click

from runner.cli.app import App
from runner.cli.options import (
    campaign_option,
)
from runner.store.campaign import Campaign


@click.command("correct")
@campaign_option
@click.option("--text", required=True, help="What was wrong, and what is right.")
@click.option("--round", "round_n", type=int, default=None, help="The closed round it is about.")
@click.option(
    "--trend", is_flag=True, help="Correct the round's row of performance_trend.md instead."
)
@click.pass_obj
def correct_cmd(app: App, name: str | None, text: str, round_n: int | None, trend: bool) -> None:
    """Append a correction to logs/optimize.md (or, with --trend, a correction row to
    logs/performance_trend.md): the only way to fix a wrong entry; the entry stays.
    Exit 5 while a record does not verify (restore it first)."""
    from runner.round.logs import correct_logs

    path = correct_logs(Campaign.find(app.campaigns_root, name), text, round_n=round_n, trend=trend)
    click.echo(f"appended a correction to {path}")


COMMANDS: list[click.Command] = [correct_cmd]
