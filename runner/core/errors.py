"""Errors are part of the interface: each subclass carries the process exit code.

They are raised anywhere and caught only in ``runner.cli.main``, which prints the
message (which must say what to do next) and exits with ``return_code``.
"""

from __future__ import annotations

from pathlib import Path

from runner.core.import_cause import explain_failure


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


class MeasurementFailed(InfrastructureError):
    """A round's measurement did not complete: a worker crashed or stopped answering, a
    role's build or the focused test could not run.  A VALIDATE round is then recorded
    as FAILED and nothing else changes; at the baseline it stops the command.

    ``message`` says what failed; ``log_path`` is the log that shows why, whose tail
    (headed by the first import error it holds) is ``tail`` and ends the text."""

    def __init__(self, message: str, log_path: Path | None = None, tail: str | None = None):
        if tail is None:
            tail = _log_tail(log_path)
        super().__init__(message + (f"\n{tail}" if tail else ""))
        self.message = message
        self.log_path = log_path
        self.tail = tail


class DeviceOutOfMemory(MeasurementFailed):
    """A worker ran out of device memory (``runner.core.device_memory``): the device's
    capacity, never a wrong result of the code under test, so never a FAIL row; exit 6
    with the figure (the shape, the bytes asked, the device's total)."""

    def __init__(
        self,
        message: str,
        log_path: Path | None = None,
        tail: str | None = None,
        record: dict[str, object] | None = None,
    ):
        super().__init__(message, log_path, tail if tail is not None else "")
        self.record = dict(record or {})


class FocusedTestFailed(MeasurementFailed):
    """The focused test failed (its ``tail`` says how): a VALIDATE round turns it into a
    veto and is judged ROLLED BACK, not FAILED; the baseline refuses the base commit."""


def _log_tail(log_path: Path | None) -> str:
    if log_path is None or not log_path.exists():
        return ""
    text = log_path.read_text(encoding="utf-8", errors="replace")
    return explain_failure(text[-1500:], text)


class CorrectnessFailed(Verdict):
    """The candidate failed its focused test (Rule 6 of upstream's iteration rules:
    correctness before performance): recorded as a failed attempt of the same round
    number, which stays open; not a round, not a rollback (``runner.flow.attempts``)."""

    return_code = 3
