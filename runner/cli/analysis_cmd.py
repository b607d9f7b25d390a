"""``campaign isa`` and ``campaign profile``: the ANALYZE step (docs/analysis.md).

``isa --round N`` diffs the assembly both roles of round N compiled to (kept by the round
under ``profiles/round-N/<role>/``) into ``profiles/round-N/isa.diff``; ``profile`` runs
the campaign's benchmark under the target's profiler (``runner.flow.profile``)."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import App
from runner.cli.options import campaign_option
from runner.core.errors import ConfigError, ProfileFailed
from runner.core.files import write_atomic
from runner.core.limits import MAX_PROFILE_TIMEOUT_S
from runner.store.campaign import Campaign


def _isa_files(campaign: Campaign, n: int) -> dict[str, dict[str, Path]]:
    """``{kernel: {role: path}}`` of the assembly round N kept."""
    result = campaign.load_result(n)
    facts = result.kernel_facts
    if facts is None or not facts.roles:
        why = (facts.note if facts else None) or "a round closed before kernel facts were recorded"
        raise ConfigError(
            f"round {n} recorded no kernel facts ({why}); install the dev extra's triton "
            "(pip install -e '.[dev]') and validate the next round, or pick a later round"
        )
    out: dict[str, dict[str, Path]] = {}
    for role, kernels in facts.roles.items():
        for name, entry in kernels.items():
            path = campaign.root / entry.isa
            if path.is_file():
                out.setdefault(name, {})[role] = path
    if not out:
        raise ConfigError(
            f"round {n}'s assembly is missing under {campaign.profiles_dir / f'round-{n}'}: "
            "it is written when the round closes; validate a new round to get it"
        )
    return out


@click.command("isa")
@click.option("--round", "n", type=int, required=True, help="The closed round to diff.")
@campaign_option
@click.option("--show", is_flag=True, help="Print the diff, not only where it is.")
@click.pass_obj
def isa_cmd(app: App, n: int, name: str | None, show: bool) -> None:
    """The full ISA of both roles of round N and a readable unified diff, under
    profiles/round-N/ (docs/analysis.md §3)."""
    from runner.render.isa_diff import isa_diff
    from runner.render.kernel_facts import facts_lines

    campaign = Campaign.find(app.campaigns_root, name)
    files = _isa_files(campaign, n)
    folder = campaign.profiles_dir / f"round-{n}"
    diffs = []
    for kernel, roles in sorted(files.items()):
        for role, path in sorted(roles.items()):
            click.echo(f"{role} {kernel}: {path}")
        if "incumbent" in roles and "candidate" in roles:
            old, new = (roles[r].read_text(encoding="utf-8") for r in ("incumbent", "candidate"))
            text, added, removed = isa_diff(old, new, roles["candidate"].name)
            diffs.append(text)
            click.echo(f"{kernel}: +{added} -{removed} lines (incumbent -> candidate)")
    diff_path = folder / "isa.diff"
    write_atomic(diff_path, "".join(diffs))
    click.echo(f"diff: {diff_path}" + ("" if any(diffs) else " (the roles' ISA is identical)"))
    for line in facts_lines(campaign.load_result(n).kernel_facts):
        click.echo(line)
    if show:
        click.echo("".join(diffs), nl=False)


@click.command("profile")
@click.option("--round", "n", type=int, required=True, help="The closed round to profile.")
@campaign_option
@click.option(
    "--tool",
    type=click.Choice(["auto", "ncu", "rocprofv3", "torch"]),
    default="auto",
    show_default=True,
    help="auto: ncu on an sm* target, rocprofv3 on a gfx* target, the torch profiler on cpu.",
)
@click.option(
    "--shapes",
    default=None,
    help="Shape label(s) to run (default: the first representative shape).",
)
@click.option(
    "--launch-count",
    "launches",
    type=int,
    default=200,
    show_default=True,
    help="ncu: profile at most this many kernel launches.",
)
@click.option(
    "--timeout",
    type=float,
    default=1800,
    show_default=True,
    callback=lambda _c, _p, v: check_timeout(v),
    help="Seconds each role's profiled run may take.",
)
@click.pass_obj
def profile_cmd(
    app: App,
    n: int,
    name: str | None,
    tool: str,
    shapes: str | None,
    launches: int,
    timeout: float,
) -> None:
    """Round N's roles under the target's profiler; a per-kernel table of each role in
    profiles/round-N/profile.md, its files beside it (docs/analysis.md §5)."""
    from runner.flow.profile import profile_round
    from runner.render.profile_table import table_markdown

    campaign = Campaign.find(app.campaigns_root, name)
    got = profile_round(campaign, n, tool=tool, shapes=shapes, launches=launches, timeout=timeout)
    click.echo(f"profile of round {n} ({got.tool}): {got.command}")
    for note in got.notes:
        click.echo(f"  {note}")
    for role, rows in got.tables.items():
        click.echo(f"\n{role}:\n{table_markdown(rows, limit=10)}")
    click.echo(f"\ntables: {got.folder / 'profile.md'}")
    if got.failed:
        raise ProfileFailed(
            f"round {n}'s profile failed for {' and '.join(got.failed)} (the notes above "
            "say why; a table is only of a role that ran): fix what its output shows, or "
            "give a larger --timeout when it timed out, and run `campaign profile` again"
        )


def check_timeout(value: float) -> float:
    """A profiled run's seconds: finite, above zero, at most ``MAX_PROFILE_TIMEOUT_S``."""
    if not 0 < value <= MAX_PROFILE_TIMEOUT_S:  # nan fails too
        raise click.BadParameter(
            f"{value!r} is not a time a profiled run can take: give seconds above 0 and at "
            f"most {MAX_PROFILE_TIMEOUT_S:.0f} (default 1800)",
            param_hint="'--timeout'",
        )
    return value


COMMANDS = [isa_cmd, profile_cmd]
