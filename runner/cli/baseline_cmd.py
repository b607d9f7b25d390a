"""``campaign baseline``: round-1, creating the campaign first when given ``--op``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from runner.cli.app import App
from runner.cli.options import (
    backend_option,
    campaign_option,
    executor_override_option,
    gpus_option,
    granularity_option,
    json_option,
    target_fields,
    target_option,
)
from runner.cli.progress_view import ProgressView, quiet_option
from runner.cli.validate_cmd import find_campaign, print_result, print_round_json
from runner.core.errors import ConfigError
from runner.core.timestamps import name_stamp
from runner.executors.factory import make_executor
from runner.flow.baseline import run_baseline
from runner.store.campaign import Campaign
from runner.store.leases import parse_gpus
from runner.store.tips import read_tips, resolve_tips_root


def _new_campaign(app: App, opts: dict[str, Any]) -> Campaign:
    from runner.flow.new_campaign import CampaignFields, create_campaign, fresh_example_copy

    source = opts["source"]
    if source is None:
        if opts["target"] != "example":
            raise ConfigError("--source is required for the primus-turbo target (your checkout)")
        stamp = click.get_current_context().meta.setdefault("stamp", name_stamp())
        source = fresh_example_copy(app.campaigns_root / "sources" / f"example-{stamp}")
    fields = CampaignFields.from_mapping(target_fields(opts, str(source)), "campaign baseline")
    return create_campaign(app.campaigns_root, fields)


@click.command("baseline")
@campaign_option
@click.option("--op", default=None, help="Create the campaign first: operator, e.g. gemm_fp8.")
@granularity_option
@backend_option
@target_option
@click.option(
    "--source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    default=None,
    help="Target git repo (default for example: a fresh copy).",
)
@click.option("--gpu", default="cpu", show_default=True, help="gfx942, gfx950, sm90 or cpu.")
@click.option("--passes", default=5, show_default=True, help="Calibration passes (>= 2).")
@executor_override_option
@click.option("--image", default=None, help="With --op: the container image (docker).")
@gpus_option
@json_option("the closed baseline (as `campaign show 1 --json`)")
@quiet_option
@click.pass_obj
def baseline_cmd(
    app: App,
    name: str | None,
    passes: int,
    executor: str | None,
    gpus: str,
    as_json: bool,
    quiet: bool,
    **opts: Any,
) -> None:
    """Round-1: full validation, noise calibration, representative shapes, records."""
    if opts["op"]:
        campaign = _new_campaign(app, {**opts, "name": name, "executor": executor})
        click.echo(f"created campaign {campaign.name}", err=True)
    else:
        campaign = find_campaign(app, name)
    tips = read_tips(campaign.manifest, resolve_tips_root(app.campaigns_root, None))
    if tips:  # with --json stdout holds the JSON alone
        click.echo(f"historical tips ({campaign.manifest.target_gpu}):\n{tips}", err=as_json)
    with ProgressView(quiet=quiet) as view:
        result = run_baseline(
            campaign,
            make_executor(campaign.manifest, executor),
            passes=passes,
            progress=view,
            gpus=tuple(parse_gpus(gpus)) if gpus else (),
        )
    if as_json:
        print_round_json(campaign, result.round)
        return
    print_result(result, campaign)
    click.echo(f"representative shapes: {', '.join(campaign.manifest.representative_shapes)}")
    click.echo(f"campaign: {campaign.root}")


COMMANDS: list[click.Command] = [baseline_cmd]
