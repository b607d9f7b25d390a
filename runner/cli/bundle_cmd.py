"""``campaign export`` and ``campaign reproduce``: move a campaign to another host and
measure it again there."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import App
from runner.cli.options import campaign_option, executor_override_option, gpus_option
from runner.cli.progress_view import ProgressView, quiet_option
from runner.core.errors import NotReproduced
from runner.core.files import sha256_file
from runner.portable.bundle import export_bundle
from runner.portable.reproduce import ReproduceRequest, reproduce
from runner.store.campaign import Campaign
from runner.store.leases import parse_gpus


@click.command("export")
@campaign_option
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Bundle file (default ./<campaign>.bundle.tar.gz).",
)
@click.pass_obj
def export_cmd(app: App, name: str | None, out: Path | None) -> None:
    """Write a self-contained, checksummed bundle of the campaign (.tar.gz)."""
    campaign = Campaign.find(app.campaigns_root, name)
    path = export_bundle(campaign, out)
    click.echo(f"bundle: {path}")
    click.echo(f"sha256: {sha256_file(path)}")
    click.echo(f"reproduce on another host: campaign reproduce {path.name} --source <target repo>")


@click.command("reproduce")
@click.argument("bundle", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--source",
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    required=True,
    help="A clone of the campaign's target repository holding its base commit.",
)
@click.option("--round", "round_n", type=int, default=None, help="Default: last accepted round.")
@executor_override_option
@click.option(
    "--tolerance",
    "tolerance_pct",
    type=float,
    default=3.0,
    show_default=True,
    help="Accepted gain difference in percentage points (at least 3 sigma_G is used).",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Work folder for the report (default: a new folder under the campaigns root).",
)
@click.option(
    "--allow-env-mismatch",
    "reason",
    metavar="REASON",
    default=None,
    help="Compare absolute figures although the environments differ (the reason is recorded).",
)
@gpus_option
@quiet_option
@click.pass_obj
def reproduce_cmd(
    app: App,
    bundle: Path,
    source: Path,
    round_n: int | None,
    executor: str | None,
    tolerance_pct: float,
    out: Path | None,
    reason: str | None,
    gpus: str,
    quiet: bool,
) -> None:
    """Verify BUNDLE, replay its lineage onto --source and re-measure round N paired
    against the baseline.  Exit 0 REPRODUCED, 3 NOT REPRODUCED, 2 bad or tampered input."""
    request = ReproduceRequest(
        bundle=bundle,
        source=source,
        campaigns_root=app.campaigns_root,
        round=round_n,
        executor=executor,
        tolerance_pct=tolerance_pct,
        out=out,
        allow_env_mismatch=reason,
        gpus=tuple(parse_gpus(gpus)) if gpus else (),
    )
    with ProgressView(quiet=quiet) as view:
        outcome = reproduce(request, progress=view)
    v = outcome.verdict
    word = "REPRODUCED" if v.reproduced else "NOT REPRODUCED"
    click.echo(f"{word}: gain vs baseline {v.measured:.4f} here, {v.recorded:.4f} recorded")
    if outcome.env.blocking:
        keys = ", ".join(d.key for d in outcome.env.blocking)
        click.echo(f"environments differ in: {keys} (see the report)")
    click.echo(f"report: {outcome.report}")
    if not v.reproduced:
        raise NotReproduced(f"round not reproduced; read {outcome.report}")


COMMANDS: list[click.Command] = [export_cmd, reproduce_cmd]
