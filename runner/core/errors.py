"""Errors are part of the interface: each subclass carries the process exit code.

They are raised anywhere and caught only in ``runner.cli.main``, which prints the
message (which must say what to do next) and exits with ``return_code``.
"""

from __future__ import annotations


class CampaignError(Exception):
    """Base class; ``return_code`` is the exit status of the ``campaign`` command."""

    return_code = 1


class ConfigError(CampaignError):
    """Bad input from the user: a flag, a manifest, a CSV, a patch, a round number."""

    return_code = 2


class SchemaDriftError(ConfigError):
    """A CSV's header differs from the schema pinned at BASELINE."""


class CsvValueError(ConfigError):
    """A CSV row holds a value the schema forbids (NaN/negative/non-numeric in PASS)."""


class AppendOnlyViolation(CampaignError):
    """An append-only log no longer starts with what was written before."""

    return_code = 5


class InfrastructureError(CampaignError):
    """Something outside the user's change broke: a subprocess, git, docker, slurm."""

    return_code = 6


class CommandFailed(InfrastructureError):
    """A subprocess exited non-zero; carries the command, exit code and output tail."""

    def __init__(self, cmd: list[str], returncode: int, output: str = "") -> None:
        self.cmd = cmd
        self.returncode = returncode
        self.output = output
        tail = output[-2000:] if output else ""
        super().__init__(
            f"command failed with exit code {returncode}: {' '.join(cmd)}"
            + (f"\n--- output (tail) ---\n{tail}" if tail else "")
        )


class Verdict(CampaignError):
    """A judged outcome that is not a success (a rollback, a refused acceptance): its exit
    code tells scripts so, and ``runner.cli.main`` prints it as a verdict, not an error."""


class RolledBack(Verdict):
    """The round was judged and rolled back (a normal outcome, not a crash)."""

    return_code = 3


class NeedsRemeasure(Verdict):
    """The improvement is in the near-noise band; more paired passes are needed."""

    return_code = 4


class NothingToDo(CampaignError):
    """The request is valid but there is no work (e.g. an empty patch)."""

    return_code = 7


class Tampered(InfrastructureError):
    """A role's files changed while the round ran (another role's process wrote to
    them): the round is FAILED as tampered, never judged (docs/reliability.md §7)."""
