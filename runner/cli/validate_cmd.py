"""``campaign validate``: a round (or a tournament of several), its printed outcome."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import click

from runner.cli.app import App
from runner.cli.options import (
    PAIRS_HELP,
    campaign_option,
    executor_override_option,
    gpus_option,
    json_option,
)
from runner.cli.progress_view import ProgressView, quiet_option
from runner.core.errors import ConfigError, InfrastructureError, RolledBack, Tampered
from runner.core.outcomes import RoundResult, Status
from runner.executors.base import Executor
from runner.executors.factory import make_executor
from runner.flow.validate import Request, validate, validate_round
from runner.judge.inconclusive import advice, inconclusive
from runner.render.figures import fmt_gain, scale_for
from runner.render.markdown import vetoed_unmeasured
from runner.store.campaign import Campaign
from runner.store.leases import parse_gpus
from runner.store.lineage import patch_subject, read_patch_file


def find_campaign(app: App, name: str | None) -> Campaign:
    return Campaign.find(app.campaigns_root, name)


def print_result(result: RoundResult, campaign: Campaign) -> None:
    gate = result.gate
    click.echo(f"round-{result.round}: {result.status.value}")
    if vetoed_unmeasured(result):
        click.echo("  not measured: vetoed before measuring (the reasons follow)")
    elif gate is not None:
        scale = scale_for(gate.metric, [gate.best_aggregate, gate.candidate_aggregate])
        click.echo(
            f"  {scale.label(gate.metric)}: {scale.num(gate.best_aggregate)} -> "
            f"{scale.value(gate.candidate_aggregate)} ({fmt_gain(gate.delta_pct, gate)})"
        )
    else:
        score = result.score
        own = scale_for(score.metric, [score.aggregate])
        click.echo(f"  {own.label(score.metric)} geomean {own.value(score.aggregate)}")
    for reason in result.reasons:
        click.echo(f"  - {reason.splitlines()[0] if reason else reason}")
    print_inconclusive(result)
    click.echo(f"  summary: {campaign.summary_path(result.round)}")
    _print_analysis(result, campaign)


def print_inconclusive(result: RoundResult) -> None:
    """A verdict too noisy to tell says so, with its figures and what to do
    (``runner.judge.inconclusive``)."""
    noisy = inconclusive(result.gate)
    if noisy is not None:
        click.echo(f"  {noisy.line()}")
        click.echo(f"  what to do: {advice(result.round)}")


def _print_analysis(result: RoundResult, campaign: Campaign) -> None:
    """The round's kernel facts, and the ANALYZE commands its rollbacks call for."""
    from runner.render.analysis_status import analysis_lines
    from runner.render.kernel_facts import facts_lines
    from runner.render.termination import consecutive_rollbacks

    for line in facts_lines(result.kernel_facts):
        click.echo(f"  {line}")
    results = campaign.results()
    for key, line in analysis_lines(results, consecutive_rollbacks(results), campaign.name)[:2]:
        click.echo(f"  {key}: {line}")


def print_round_json(campaign: Campaign, n: int) -> None:
    """The closed round N as `campaign show N --json` prints it."""
    click.echo(json.dumps(_round_json(campaign, n), allow_nan=False))


@click.command("validate")
@campaign_option
@click.option("--round", "round_n", type=int, required=True, help="The next round number.")
@click.option(
    "--hypothesis",
    "hypotheses",
    multiple=True,
    help="The one hypothesis this change tests; repeated: the k-th goes with the k-th "
    "--patch (a tournament).  May be left out for a `git format-patch` file: its subject.",
)
@click.option(
    "--patch",
    "patches",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    multiple=True,
    help="Candidate patch (default: the source tree's diff); repeated: a tournament, entry "
    "k is round N+k-1, all judged against the incumbent in one paired measurement.",
)
@click.option("--level", type=click.Choice(["quick", "full"]), default="quick", show_default=True)
@click.option(
    "--restore",
    is_flag=True,
    help="On rollback, reset the touched files to the head (the default now; kept for old "
    "scripts).",
)
@click.option(
    "--keep-checkout",
    is_flag=True,
    help="On ROLLED BACK or FAILED leave the checkout as it is (by default its edit is put "
    "back to the lineage head and kept under a ref; docs/protocol.md §6.7).",
)
@click.option(
    "--bucket",
    "buckets",
    multiple=True,
    help="Transfer bucket (docs/protocol.md §8.2): K1-K4, W1 (default K1); one per --patch, "
    "or one for all.",
)
@click.option("--pairs", type=int, default=None, help=PAIRS_HELP)
@executor_override_option
@gpus_option
@click.option(
    "--allow-env-mismatch",
    "allow_env_mismatch",
    metavar="REASON",
    default=None,
    help="Compare despite a performance-relevant environment difference (recorded).",
)
@click.option(
    "--allow-outside",
    "allow_outside",
    metavar="PATH",
    multiple=True,
    help="Let the change touch PATH outside kernel_source (repeatable; recorded). The "
    "focused test still runs as the lineage head has it.",
)
@click.option("--attribution", default="", help="Why the last rolled-back round behaved as it did.")
@click.option(
    "--root-cause",
    "root_cause",
    default="",
    help="Diagnosis of the last rollback (Rule 7): why it did not help; with --lesson.",
)
@click.option("--lesson", default="", help="What the last rollback says about the bottleneck.")
@click.option(
    "--target-shape",
    "targeted",
    multiple=True,
    metavar="LABEL",
    help="Declare a targeted-shape round (Rule 3's exception, docs/protocol.md §5.4): the "
    "gate judges these shapes only; the others' regressions are reported (repeatable).",
)
@click.option(
    "--no-confirm",
    "no_confirm",
    is_flag=True,
    help="Do not confirm a borderline (<5%) or high-risk quick acceptance at the full level "
    "(upstream's VALIDATE rule; the round records that it was skipped).",
)
@click.option(
    "--resubmit",
    is_flag=True,
    help="Measure a change that runs a rolled-back round's code again (only its comments, "
    "whitespace or new names differ; refused without this flag, Rule 7): an accepting "
    "reading stands only within what is left of the campaign's false-accept budget.",
)
@json_option("the closed round (as `campaign show N --json`; a tournament: a list)")
@quiet_option
@click.pass_obj
def validate_cmd(
    app: App,
    name: str | None,
    round_n: int,
    hypotheses: tuple[str, ...],
    patches: tuple[Path, ...],
    level: str,
    restore: bool,
    keep_checkout: bool,
    buckets: tuple[str, ...],
    pairs: int | None,
    executor: str | None,
    gpus: str,
    allow_env_mismatch: str | None,
    allow_outside: tuple[str, ...],
    targeted: tuple[str, ...],
    no_confirm: bool,
    resubmit: bool,
    as_json: bool,
    quiet: bool,
    **diagnosis: str,  # --attribution, --root-cause, --lesson
) -> None:
    """VALIDATE round N: the candidate against the last accepted round, paired.  Several
    --patch: a tournament of rounds N, N+1, ... (docs/protocol.md §1.5).  Exit 0
    ACCEPTED, 3 ROLLED BACK (a verdict), 6 FAILED to measure, 2 bad input."""
    campaign = find_campaign(app, name)
    entries = entry_pairs(hypotheses, patches)
    bucket_of = _buckets(buckets, len(entries))
    shared = Request(
        round_n,
        "",
        None,
        level,
        not keep_checkout,
        pairs=pairs,
        allow_outside=allow_outside,
        gpus=tuple(parse_gpus(gpus)) if gpus else (),
        allow_env_mismatch=allow_env_mismatch,
        diagnosis=tuple(diagnosis.items()),
        targeted=targeted,
        confirm=not no_confirm,
        resubmit=resubmit,
    )
    requests = [
        replace(shared, round=round_n + k, hypothesis=hypothesis, patch=text, bucket=bucket_of[k])
        for k, (hypothesis, text) in enumerate(entries)
    ]
    run = make_executor(campaign.manifest, executor)
    results = _run_requests(campaign, run, requests, restore=restore, quiet=quiet)
    for result in [] if as_json else results:
        print_result(result, campaign)
    if as_json:
        reports = [_round_json(campaign, r.round) for r in results]
        click.echo(json.dumps(reports[0] if len(reports) == 1 else reports, allow_nan=False))
    elif results[0].tournament is not None:
        click.echo(results[0].tournament.line)
    print_termination(campaign, quiet=as_json)
    _exit_for(results)


def _run_requests(
    campaign: Campaign, run: Executor, requests: list[Request], *, restore: bool, quiet: bool
) -> list[RoundResult]:
    """One round, or with several requests a tournament of them, under a progress view."""
    if len(requests) > 1:
        if requests[0].resubmit:
            raise ConfigError(
                "--resubmit measures one change again, judged against the campaign's "
                "false-accept budget; a tournament takes new changes only: run it as a "
                "round of its own"
            )
        if restore:
            raise ConfigError(
                "--restore resets a single round's working-tree change; a tournament's "
                "changes come from --patch files: leave --restore out"
            )
        with ProgressView(quiet=quiet) as view:
            return validate(campaign, run, requests, progress=view)
    with ProgressView(quiet=quiet) as view:
        return [validate_round(campaign, run, requests[0], progress=view)]


def print_termination(campaign: Campaign, *, quiet: bool = False) -> None:
    """The termination check after the round (a step of the loop: docs/protocol.md §7.2);
    nothing with ``quiet`` (--json prints the round alone)."""
    if quiet:
        return
    from runner.render.termination import campaign_termination

    fresh = Campaign.load(campaign.root)
    results = fresh.results()
    click.echo("termination check:")
    for line in campaign_termination(fresh, results).lines():
        click.echo(f"  {line}")


def entry_pairs(hypotheses: Sequence[str], patches: Sequence[Path]) -> list[tuple[str, str | None]]:
    """(hypothesis, patch text) per entry: the k-th --hypothesis with the k-th --patch,
    or, with no --hypothesis, each patch's `git format-patch` subject; no --patch: the
    source tree's diff (None) with its one hypothesis."""
    texts = [read_patch_file(p) for p in patches]
    if not texts:
        if len(hypotheses) != 1:
            raise ConfigError(
                "state the hypothesis before the change: --hypothesis TEXT (several need "
                "one --patch FILE each)"
            )
        return [(hypotheses[0], None)]
    if hypotheses and len(hypotheses) != len(texts):
        raise ConfigError(
            f"{len(hypotheses)} --hypothesis for {len(texts)} --patch: give each patch its "
            "hypothesis, in the same order (or none, for `git format-patch` files)"
        )
    if hypotheses:
        return list(zip(hypotheses, texts, strict=True))
    out: list[tuple[str, str | None]] = []
    for path, text in zip(patches, texts, strict=True):
        subject = patch_subject(text)
        if subject is None:
            raise ConfigError(
                f"{path} has no `git format-patch` subject to take the hypothesis from: "
                "pass --hypothesis TEXT for every --patch"
            )
        out.append((subject, text))
    return out


def _buckets(buckets: Sequence[str], n: int) -> list[str]:
    if not buckets:
        return ["K1"] * n
    if len(buckets) == 1:
        return [buckets[0]] * n
    if len(buckets) != n:
        raise ConfigError(f"{len(buckets)} --bucket for {n} entries: give one, or one per --patch")
    return list(buckets)


def _round_json(campaign: Campaign, n: int) -> dict[str, object]:
    from runner.cli.mcp_models import round_report

    return round_report(campaign, n).model_dump(mode="json")


def _exit_for(results: Sequence[RoundResult]) -> None:
    """Exit 0 when a round (of a tournament: its winner) was ACCEPTED; otherwise 3 for
    a verdict, 6 when every round FAILED (TAMPERED named as such)."""
    if any(r.status is Status.ACCEPTED for r in results):
        return
    first, last = results[0].round, results[-1].round
    what = f"round-{first}" if first == last else f"rounds {first}-{last}"
    if any(r.status is Status.ROLLED_BACK for r in results):
        raise RolledBack(
            f"{what} ROLLED BACK; the lineage is unchanged (exit code "
            f"{RolledBack.return_code}); validate the next hypothesis as round-{last + 1}"
        )
    if any(r.key_finding.startswith("TAMPERED") for r in results):
        raise Tampered(
            f"{what} FAILED as TAMPERED (the lineage is unchanged): a role's files "
            "changed while the round ran; its summary names them; review the candidate patch "
            "before validating the next round",
            guard="round record",
        )
    raise InfrastructureError(
        f"{what} failed to measure (recorded as FAILED; the lineage is "
        "unchanged); fix the crash shown in its summary and validate the next round"
    )


COMMANDS: list[click.Command] = [validate_cmd]
