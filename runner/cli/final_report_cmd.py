"""``campaign report``: the Termination Check and the Final Report."""

from __future__ import annotations

import click

from runner.cli.app import App
from runner.cli.options import (
    campaign_option,
)
from runner.store.campaign import Campaign


@click.command("report")
@campaign_option
@click.option("--stop", "user_stop", is_flag=True, help="T4: the user asked to stop.")
@click.pass_obj
def report_cmd(app: App, name: str | None, user_stop: bool) -> None:
    """Write the Termination Check and the Final Report to report/final_report.md and
    report/index.html with its pictures (regenerated each run); when one of T1-T4 holds,
    append them once to the end of logs/optimize.md (docs/protocol.md §6.3)."""
    from runner.flow.report import write_report

    campaign = Campaign.find(app.campaigns_root, name)
    outcome = write_report(campaign, user_stop=user_stop)
    if outcome.termination is not None:
        click.echo(f"termination check: {outcome.termination.verdict()}")
    if outcome.appended:
        click.echo(
            f"appended the Termination Check and the Final Report to {campaign.optimize_log}"
        )
    click.echo(f"report: {outcome.markdown}")
    click.echo(f"html: {outcome.html}")
    for picture in outcome.pictures:
        click.echo(f"picture: {picture}")


COMMANDS: list[click.Command] = [report_cmd]
