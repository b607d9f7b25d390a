"""``campaign set FIELD VALUE --reason TEXT``: a deliberate, recorded change of a field
that steers the gate (``runner.store.gate_ledger``)."""

from __future__ import annotations

import click

from runner.cli.app import App
from runner.cli.options import campaign_option
from runner.store.campaign import Campaign
from runner.store.gate_ledger import SETTABLE


@click.command("set")
@click.argument("field", metavar="FIELD", type=click.Choice(SETTABLE))
@click.argument("value", metavar="VALUE")
@campaign_option
@click.option("--reason", required=True, help="Why the field changes (recorded).")
@click.pass_obj
def set_cmd(app: App, field: str, value: str, name: str | None, reason: str) -> None:
    """Change a gate field (sigma_g, primary_metric, the shapes, pairs, ...) as a recorded
    change: a line in optimize.md and a new entry in logs/gate_fields.jsonl.  VALUE is
    YAML (0.05, 5%, [a, b, c], Forward TFLOPS).  `campaign set gate_constants current`
    makes the gate constants of this turbo-campaign the campaign's (after an upgrade
    that changed the gate).  Exit 5 while a record does not verify or another gate
    field was edited by hand."""
    from runner.flow.settings import set_gate_field

    line = set_gate_field(Campaign.find(app.campaigns_root, name), field, value, reason)
    click.echo(f"recorded: {line}")


COMMANDS: list[click.Command] = [set_cmd]
