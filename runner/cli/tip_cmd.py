"""``campaign tip``: a historical tip learnt in a closed round."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import App
from runner.cli.options import (
    campaign_option,
)
from runner.store.campaign import Campaign
from runner.store.tips import TIPS_ROOT_ENV, Tip, append_tip, resolve_tips_root


@click.command("tip")
@campaign_option
@click.option("--round", "round_n", type=int, required=True, help="A closed round.")
@click.option("--text", required=True, help="The takeaway: what to do or avoid next time.")
@click.option("--context", default="", help="Default: the round's hypothesis.")
@click.option("--signal", default="", help="Default: the round's key finding.")
@click.option("--applicability", default="", help="Default: this op, backend and GPU.")
@click.option(
    "--tips-root",
    default=None,
    type=click.Path(file_okay=False, path_type=Path),
    help=f"Tips root (env {TIPS_ROOT_ENV}; default <campaigns-root>/tips).",
)
@click.pass_obj
def tip_cmd(
    app: App,
    name: str | None,
    round_n: int,
    text: str,
    context: str,
    signal: str,
    applicability: str,
    tips_root: Path | None,
) -> None:
    """Append a historical tip learnt in a closed round (docs/protocol.md §6.8)."""
    campaign = Campaign.find(app.campaigns_root, name)
    root = resolve_tips_root(app.campaigns_root, tips_root)
    path = append_tip(campaign, root, Tip(round_n, text, context, signal, applicability))
    click.echo(f"appended a tip for round-{round_n} to {path}")


COMMANDS: list[click.Command] = [tip_cmd]
