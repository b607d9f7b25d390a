"""``campaign rounds`` and ``campaign show N``: the closed rounds of a campaign, read by
the same functions as the MCP tools ``list_rounds`` and ``round_summary``
(``runner.cli.mcp_models``), so the command line and an agent see the same records."""

from __future__ import annotations

import json

import click
from tabulate import tabulate

from runner.cli.app import App
from runner.cli.options import campaign_option, json_option
from runner.render.escape import printable
from runner.store.campaign import Campaign


@click.command("rounds")
@campaign_option
@json_option("the rounds")
@click.pass_obj
def rounds_cmd(app: App, name: str | None, as_json: bool) -> None:
    """The closed rounds, oldest first: number, status, the gate's decision, the gain
    against the best of the time (± over its pairs), the hypothesis."""
    from runner.cli.mcp_models import round_infos
    from runner.render.figures import fmt_gain, short_text

    infos = round_infos(Campaign.find(app.campaigns_root, name))
    if as_json:
        click.echo(json.dumps([i.model_dump(mode="json") for i in infos], allow_nan=False))
        return
    rows = [
        [
            f"round-{i.round}",
            i.status,
            i.decision or "—",
            fmt_gain(i.delta_pct, i.pair_gains_pct) if i.delta_pct is not None else "—",
            "baseline" if i.round == 1 else short_text(i.hypothesis),
        ]
        for i in infos
    ]
    headers = ["Round", "Status", "Decision", "Gain vs best", "Hypothesis"]
    click.echo(tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True))


@click.command("show")
@click.argument("n", type=int, metavar="N")
@campaign_option
@json_option("the round's summary and result.json")
@click.pass_obj
def show_cmd(app: App, n: int, name: str | None, as_json: bool) -> None:
    """One closed round: its summary.md (with --json: the summary and result.json)."""
    from runner.cli.mcp_models import round_report

    report = round_report(Campaign.find(app.campaigns_root, name), n)
    if as_json:
        click.echo(json.dumps(report.model_dump(mode="json"), allow_nan=False))
    else:
        click.echo(printable(report.summary_md), nl=False)  # written by the user in part


COMMANDS: list[click.Command] = [rounds_cmd, show_cmd]
