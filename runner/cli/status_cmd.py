"""``campaign status``: the campaign at a glance, and whether its records verify."""

from __future__ import annotations

import json

import click

from runner.cli.app import App
from runner.cli.options import (
    campaign_option,
    json_option,
)
from runner.core.errors import AppendOnlyViolation
from runner.store.campaign import Campaign
from runner.store.gate_ledger import CONSTANTS_PROBLEM, CONSTANTS_RECOVERY
from runner.store.guard import GATE_RECOVERY, RECOVERY


@click.command("status")
@campaign_option
@json_option("the status")
@click.pass_obj
def status_cmd(app: App, name: str | None, as_json: bool) -> None:
    """At a glance: the current best and headline gain, the table of rounds, sigma_G and
    the acceptance threshold, the running command, the last final acceptance, the
    checkout against the lineage head, the escalation step, the next round, chain
    integrity."""
    from runner.render.status import collect_status, render_status

    status = collect_status(Campaign.find(app.campaigns_root, name))
    if as_json:
        click.echo(json.dumps(status.to_dict(), allow_nan=False))
    else:
        click.echo(render_status(status))
    if status.record_problems:
        problems = status.record_problems
        constants = [p for p in problems if p.startswith(CONSTANTS_PROBLEM)]
        others = [p for p in problems if p not in constants]
        named = [p.split(" ", 1)[0].rstrip(":") for p in others]
        files = ", ".join([*named, *(["the gate's constants"] if constants else [])])
        fields = any("gate field(s)" in p for p in others)
        how = GATE_RECOVERY if fields else RECOVERY
        if constants:
            how = CONSTANTS_RECOVERY + (f"; {how}" if others else "")
        raise AppendOnlyViolation(
            f"the append-only records of {status.campaign} do not verify ({files}); {how}"
        )


COMMANDS: list[click.Command] = [status_cmd]
