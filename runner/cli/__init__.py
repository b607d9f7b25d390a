"""The ``campaign`` command line.  One module per command (or group of commands), named
after it; each module exposes
``COMMANDS`` (a list of click commands) that is registered here.  Errors are caught
only in ``main`` (a ``CampaignError`` by its exit code; an ``OSError`` of a path that
cannot be written, such as a read-only folder, as bad input: exit 2)."""

from __future__ import annotations

import errno
import logging
import sys

import click

from runner import __version__
from runner.cli import (
    accept_cmd,
    analysis_cmd,
    baseline_cmd,
    bundle_cmd,
    correct_cmd,
    demo_cmd,
    final_report_cmd,
    history_cmd,
    image_cmd,
    init_cmd,
    mcp_cmd,
    offline,
    settings_cmd,
    status_cmd,
    tip_cmd,
    validate_cmd,
)
from runner.cli.app import CAMPAIGNS_ROOT_ENV, App
from runner.core import interrupts
from runner.core.errors import CampaignError, ConfigError, InfrastructureError, Verdict
from runner.core.limits import check_utf8, excerpt


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="campaign")
@click.option(
    "--campaigns-root",
    metavar="DIR",
    default=None,
    help=f"Where campaign directories live (env {CAMPAIGNS_ROOT_ENV}; default ./campaigns).",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every subprocess.")
@click.pass_context
def cli(ctx: click.Context, campaigns_root: str | None, verbose: bool) -> None:
    """Run kernel-optimisation campaigns: baseline, validate rounds, gate, records."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING, format="%(name)s: %(message)s"
    )
    ctx.obj = App.from_env(campaigns_root)


for _module in (
    offline,
    init_cmd,
    baseline_cmd,
    validate_cmd,
    history_cmd,
    demo_cmd,
    image_cmd,
    mcp_cmd,
    status_cmd,
    final_report_cmd,
    accept_cmd,
    tip_cmd,
    correct_cmd,
    bundle_cmd,
    settings_cmd,
    analysis_cmd,
):
    for _command in _module.COMMANDS:
        cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: the only place a ``CampaignError`` is caught."""
    with interrupts.installed():
        _main(argv)


def _check_arguments(argv: list[str]) -> None:
    """Refuse an argument that is not UTF-8 before any command starts (a latin-1
    terminal's bytes would reach a record only after the round was measured)."""
    for i, arg in enumerate(argv):
        check_utf8(arg, f"argument {i + 1}")


def _main(argv: list[str] | None) -> None:
    try:
        _check_arguments(sys.argv[1:] if argv is None else argv)
        rc = cli.main(args=argv, prog_name="campaign", standalone_mode=False)
    except click.ClickException as exc:
        exc.show()
        sys.exit(2)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo(
            "interrupted: an unfinished round records nothing; run the same round again",
            err=True,
        )
        sys.exit(130)
    except Verdict as exc:  # the verdict itself was printed; this says what it means
        click.echo(f"verdict: {exc}", err=True)
        sys.exit(exc.return_code)
    except CampaignError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(exc.return_code)
    except OSError as exc:
        if exc.errno in FULL_ERRNOS:
            click.echo(f"error: {disk_full(exc)}", err=True)
            sys.exit(InfrastructureError.return_code)
        if exc.errno not in PATH_ERRNOS:
            raise
        click.echo(f"error: {path_error(exc)}", err=True)
        sys.exit(ConfigError.return_code)
    sys.exit(rc if isinstance(rc, int) else 0)


# A folder the user pointed us at cannot be written (read-only, not theirs, a file where
# a folder belongs): bad input with a way out (exit 2), never a traceback.
PATH_ERRNOS = frozenset(
    (
        errno.EROFS,
        errno.EACCES,
        errno.EPERM,
        errno.ENOTDIR,
        errno.EISDIR,
        errno.EEXIST,
        errno.ENAMETOOLONG,
    )
)


# The disk (or the quota) is full: the machine's fault, not the input's (exit 6).
FULL_ERRNOS = frozenset((errno.ENOSPC, errno.EDQUOT))


def disk_full(exc: OSError) -> str:
    """What a full disk left behind, and what to do."""
    where = f"{exc.filename}" if exc.filename is not None else "a file"
    return (
        f"the disk is full: cannot write {where} ({exc.strerror or exc}). What was kept: "
        "every record file is replaced whole or not at all (written to a temporary file, "
        "then renamed into place), so none is half-written, and a round that did not "
        "close has no result.json (it records nothing until it closes). Free space on "
        "that filesystem (df -h shows it), then run the same command again (a round "
        "closes once); `campaign status` checks the records."
    )


def path_error(exc: OSError) -> str:
    """What went wrong with which path, and what to do about it."""
    where = f"{exc.filename}" if exc.filename is not None else "a file"
    if exc.errno == errno.ENAMETOOLONG:
        return (
            f"a name is too long for the filesystem ({len(str(where))} characters in "
            f"{excerpt(where)}): give a shorter name (a campaign name, a tip's op or "
            "backend, a folder); nothing was written"
        )
    return (
        f"cannot write {where} ({exc.strerror or exc}): the campaign folder, the campaigns "
        "root and the tips root must be folders you can write. Remount read-write or fix "
        "the permissions, point --campaigns-root/--tips-root elsewhere, or copy the "
        "campaign somewhere writable"
    )
