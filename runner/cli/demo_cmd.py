"""``campaign demo``: the whole loop on the bundled example package."""

from __future__ import annotations

import click

from runner.cli.app import App
from runner.cli.progress_view import ProgressView, quiet_option
from runner.cli.validate_cmd import print_inconclusive
from runner.flow.demo import run_demo
from runner.render.escape import printable
from runner.render.figures import fmt_gain


@click.command("demo")
@click.option("--passes", default=3, show_default=True, help="Baseline calibration passes.")
@click.option("--device", type=click.Choice(["cpu", "cuda"]), default="cpu", show_default=True)
@quiet_option
@click.pass_obj
def demo_cmd(app: App, passes: int, device: str, quiet: bool) -> None:
    """Baseline, a slow-down (ROLLED BACK) and a speed-up (ACCEPTED) on a fresh copy."""
    with ProgressView(quiet=quiet) as view:
        campaign, results = run_demo(app.campaigns_root, view, device=device, passes=passes)
    for r in results:
        gate = r.gate
        delta = f" ({fmt_gain(gate.delta_pct, gate)} vs incumbent)" if gate else ""
        click.echo(f"round-{r.round}: {r.status.value}{delta}")
        if gate is not None and r.status.value.startswith("ACCEPTED") and gate.reasons:
            click.echo(f"  {accepted_why(gate.reasons[0])}")
        print_inconclusive(r)
    click.echo(f"campaign: {campaign.root}")


def accepted_why(reason: str) -> str:
    """Which rule accepted a round and why, for a reader who sees a gain whose ± reaches
    below zero."""
    return (
        f"accepted by the gate: {printable(reason, keep_newlines=False)}. The ± is the "
        "spread of one pair's reading, not the gain's interval: a gain at or over the "
        "threshold max(2%, 3 sigma_G) is accepted when its paired interval lies above 0, "
        "or, on fewer pairs than the rules need, only when every pair read beyond the "
        "threshold; a gain nearer the noise only on re-measurements "
        "(docs/measurement.md §4.2)"
    )


COMMANDS: list[click.Command] = [demo_cmd]
