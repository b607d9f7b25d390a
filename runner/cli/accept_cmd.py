"""``campaign accept``: final acceptance of the lineage head."""

from __future__ import annotations

import json

import click

from runner.cli.app import App
from runner.cli.options import (
    BLOCKS_HELP,
    campaign_option,
    executor_override_option,
    gpus_option,
    json_option,
)
from runner.cli.progress_view import ProgressView, quiet_option
from runner.core.errors import NotAccepted
from runner.store.campaign import Campaign


@click.command("accept")
@campaign_option
@click.option("--passes", default=2, show_default=True, help=BLOCKS_HELP)
@executor_override_option
@gpus_option
@json_option("the acceptance record (acceptance/acceptance.json)")
@quiet_option
@click.pass_obj
def accept_cmd(
    app: App,
    name: str | None,
    passes: int,
    executor: str | None,
    gpus: str,
    as_json: bool,
    quiet: bool,
) -> None:
    """Final acceptance of the lineage head: full validation against the base commit,
    the full benchmark, the full test suite, the branch check.  Exit 0 ACCEPTED,
    3 NOT ACCEPTED, 2 bad input."""
    from runner.executors.factory import make_executor
    from runner.flow.accept import run_acceptance
    from runner.store.acceptance import acceptance_dir
    from runner.store.leases import parse_gpus

    campaign = Campaign.find(app.campaigns_root, name)
    _say_termination(campaign, as_json)
    with ProgressView(quiet=quiet) as view:
        result = run_acceptance(
            campaign,
            make_executor(campaign.manifest, executor),
            passes=passes,
            progress=view,
            gpus=tuple(parse_gpus(gpus)) if gpus else (),
        )
    if as_json:
        click.echo(json.dumps(result.to_dict(), allow_nan=False))
    else:
        verdict = "ACCEPTED" if result.accepted else "NOT ACCEPTED"
        click.echo(f"final acceptance: {verdict}")
        for check in result.checks:
            click.echo(f"  {'PASS' if check.ok else 'FAIL'} {check.name}: {check.detail}")
        click.echo(f"record: {acceptance_dir(campaign) / 'acceptance.md'}")
    if not result.accepted:
        raise NotAccepted(
            "the final best is NOT ACCEPTED: fix the failed checks above, then run "
            "`campaign accept` again"
        )


def _say_termination(campaign: Campaign, quiet: bool) -> None:
    """Before final acceptance: whether the termination check holds (it runs either
    way; accepting while none holds is the user's call, said aloud)."""
    from runner.render.termination import campaign_termination

    results = campaign.results()
    check = campaign_termination(campaign, results)
    if not quiet:
        click.echo(f"termination check: {check.verdict()}")


COMMANDS: list[click.Command] = [accept_cmd]
