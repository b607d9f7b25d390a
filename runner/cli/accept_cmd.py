"""``campaign status``, ``campaign report``, ``campaign accept``, ``campaign tip`` and
``campaign correct``."""

from __future__ import annotations

import json
from pathlib import Path

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
from runner.core.errors import AppendOnlyViolation
from runner.store.campaign import Campaign
from runner.store.gate_ledger import CONSTANTS_PROBLEM, CONSTANTS_RECOVERY
from runner.store.guard import GATE_RECOVERY, RECOVERY
from runner.store.tips import TIPS_ROOT_ENV, Tip, append_tip, resolve_tips_root


def _find(app: App, name: str | None) -> Campaign:
    return Campaign.find(app.campaigns_root, name)


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

    status = collect_status(_find(app, name))
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


@click.command("report")
@campaign_option
@click.option("--stop", "user_stop", is_flag=True, help="T4: the user asked to stop.")
@click.pass_obj
def report_cmd(app: App, name: str | None, user_stop: bool) -> None:
    """Write the Termination Check and the Final Report to report/final_report.md and
    report/index.html with its pictures (regenerated each run); when one of T1-T4 holds,
    append them once to the end of logs/optimize.md (docs/protocol.md §6.3)."""
    from runner.flow.report import write_report

    campaign = _find(app, name)
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
    from runner.flow.acceptance_record import NotAccepted
    from runner.store.acceptance import acceptance_dir
    from runner.store.leases import parse_gpus

    campaign = _find(app, name)
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
    from runner.render.status import consecutive_rollbacks
    from runner.render.termination import termination_check

    results = campaign.results()
    check = termination_check(campaign.manifest, results, consecutive_rollbacks(results))
    if not quiet:
        click.echo(f"termination check: {check.verdict()}")


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
    campaign = _find(app, name)
    root = resolve_tips_root(app.campaigns_root, tips_root)
    path = append_tip(campaign, root, Tip(round_n, text, context, signal, applicability))
    click.echo(f"appended a tip for round-{round_n} to {path}")


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
    from runner.flow.records import correct_logs

    path = correct_logs(_find(app, name), text, round_n=round_n, trend=trend)
    click.echo(f"appended a correction to {path}")


COMMANDS: list[click.Command] = [status_cmd, report_cmd, accept_cmd, tip_cmd, correct_cmd]
