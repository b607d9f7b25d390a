"""Errors are part of the interface: each subclass carries the process exit code.

They are raised anywhere and caught only in ``runner.cli.main``, which prints the
message (which must say what to do next) and exits with ``return_code``.  Every error
class of the host side is here, one tree under ``CampaignError``; a case that a caller
or a test tells apart has its own class, so code and tests match a type, never the
message text::

    CampaignError (1)
    +-- ConfigError (2): bad input
    |   +-- CampaignNotFound, CampaignBusy, RecordDamaged, RoundOutOfOrder
    |   +-- PatchRefused, RepeatedHypothesis, CheckoutOffLineage, ValueRefused
    |   +-- SchemaDriftError, CsvValueError (TargetsMissing), GpuBusy
    |   +-- FingerprintMismatch, BundleError
    +-- AppendOnlyViolation (5)
    +-- InfrastructureError (6): CommandFailed, Tampered, SpeedOfLightError,
    |   ProfileFailed, MeasurementFailed (DeviceOutOfMemory, FocusedTestFailed,
    |   LdsOverLimit, WorkerCrashed)
    +-- Verdict: RolledBack (3), NeedsRemeasure (4), CorrectnessFailed (3),
    |   NotAccepted (3), NotReproduced (3)
    +-- NothingToDo (7)

The worker side (``runner.worker.bench``, ``runner.worker.ops``) raises its own RuntimeErrors inside
the worker process; the host sees them only as a worker's reply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.core.import_cause import explain_failure


class CampaignError(Exception):
    """Base class; ``return_code`` is the exit status of the ``campaign`` command."""

    return_code = 1


class ConfigError(CampaignError):
    """Bad input from the user: a flag, a manifest, a CSV, a patch, a round number."""

    return_code = 2


class CampaignNotFound(ConfigError):
    """No campaign where the command looked (a name, a path, a campaigns root), or
    several where it needs one named."""


class CampaignBusy(ConfigError):
    """Another campaign command holds the campaign's lock: wait for it, then retry."""


class RecordDamaged(ConfigError):
    """A file the campaign wrote is no longer what it wrote: not valid JSON, malformed,
    not text, or of a ``schema_version`` this release does not read."""


class RoundOutOfOrder(ConfigError):
    """A round number the command cannot take now: not the next round, already closed,
    not yet closed, or past ``max_iterations``."""


class PatchRefused(ConfigError):
    """A candidate patch refused before anything was measured: it does not apply, is
    too large or not text, changes a file's kind, or reaches outside the round's scope."""


class RepeatedHypothesis(ConfigError):
    """Rule 7 of upstream's iteration rules: a hypothesis or a patch that an earlier
    round (or another tournament entry) already judged.  ``earlier``: that round's
    number (None: another entry of the same tournament); ``same``: what repeats it
    (``REPEATS``)."""

    REPEATS = ("hypothesis", "bytes", "code")  # its words, its patch, its rolled-back code

    def __init__(self, message: str, *, earlier: int | None, same: str) -> None:
        if same not in self.REPEATS:
            raise ValueError(f"RepeatedHypothesis(same={same!r}): one of {self.REPEATS}")
        super().__init__(message)
        self.earlier = earlier
        self.same = same


class CheckoutOffLineage(ConfigError):
    """The user's checkout is not at the lineage head, and its diff against the head
    would undo accepted rounds: the round's change cannot be read from it."""


class ValueRefused(ConfigError):
    """A flag, setting or text outside what the tool takes: a count out of range, an
    unknown name (op, bucket, shape, gate field, GPU), a text over its size limit."""


class GpuBusy(ConfigError):
    """A requested GPU is leased by another process."""


class FingerprintMismatch(ConfigError):
    """Two measurements ran on environments that differ in a performance-relevant
    field; comparing them needs an explicit, recorded reason.  ``diffs`` are the
    differing fields (``runner.store.fingerprint.FingerprintDiff``)."""

    def __init__(self, message: str, diffs: Sequence[object]) -> None:
        super().__init__(message)
        self.diffs = list(diffs)


class BundleError(ConfigError):
    """A bundle that cannot be trusted or read: tampered, incomplete, wrong version."""


class SchemaDriftError(ConfigError):
    """A CSV's header differs from the schema pinned at BASELINE."""


class CsvValueError(ConfigError):
    """A CSV row holds a value the schema forbids (NaN/negative/non-numeric in PASS)."""


class TargetsMissing(CsvValueError):
    """A benchmark's CSV has no row for some of the campaign's target shapes (matched by
    case and M, N, K); ``missing`` lists their labels, and the message names each."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = list(missing)


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


class SpeedOfLightError(InfrastructureError):
    """A measured number is above the GPU's peak: the timing or the work count is wrong."""


class ProfileFailed(InfrastructureError):
    """A role's profiled run (``campaign profile``) timed out or exited non-zero: the
    tables of the roles that ran are written all the same, and the command fails."""


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
    them), or the records the gate reads are not the ones the host was told: the round
    is FAILED as tampered, never judged (docs/reliability.md §7).  ``guard``: the guard
    that found it; ``problems``: what it found, one line each."""

    def __init__(self, message: str, *, guard: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.guard = guard
        self.problems = list(problems)


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


class LdsOverLimit(MeasurementFailed):
    """A candidate's kernel asks for more LDS than the target arch has (its kernel facts,
    ``runner.core.isa_facts``): refused before it is measured, the kernel and its bytes
    named; on AMD such a launch may run and read garbage instead of failing."""


class DeviceOutOfMemory(MeasurementFailed):
    """A worker ran out of device memory (``runner.core.device_memory``): the device's
    capacity, never a wrong result of the code under test, so never a FAIL row; exit 6
    with the figure (the shape, the bytes asked, the device's total)."""

    def __init__(
        self,
        message: str,
        log_path: Path | None = None,
        tail: str | None = None,
        record: Mapping[str, object] | None = None,
    ):
        super().__init__(message, log_path, tail if tail is not None else "")
        self.record = dict(record or {})


class WorkerCrashed(MeasurementFailed):
    """A worker died by a crash signal (``signal``: SIGSEGV, SIGABRT, ...) without
    answering: no error of its own code, which a worker reports.  On a GPU a graph
    replay can do this (MI350 under ROCm 7.1-7.2); ``runner.measure.paired`` then
    measures once more with plain launches."""

    def __init__(self, message: str, log_path: Path | None = None, *, signal: int):
        super().__init__(message, log_path)
        self.signal = signal


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


class NotAccepted(Verdict):
    """``campaign accept`` ran and the final best was not accepted."""

    return_code = 3


class NotReproduced(Verdict):
    """``campaign reproduce``: the measured gain is outside the recorded interval and
    the tolerance."""

    return_code = 3
