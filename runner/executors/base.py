"""The executor seam: run one worker job in an isolated environment.

A job is a round spec (JSON) plus the source tree to measure; the worker writes its
artifacts into a folder the host owns.  Local, docker and slurm executors implement
``Executor.run_job`` and are otherwise interchangeable.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class WorkerJob:
    """One worker invocation.

    ``source_dir`` is a fresh worktree of the target at the code to measure (never the
    user's checkout).  ``prepare`` are the commands (argv lists, run with cwd =
    source_dir) that make that tree importable in the environment (e.g. an editable
    reinstall after a ``csrc/**`` change); ``env`` the extra environment for the
    worker (backend selector, PYTHONPATH for pure-Python targets).  The worker runs as
    ``python -m runner.worker <spec>`` and must leave ``benchmark.csv`` in ``out_dir``.
    """

    name: str  # e.g. "pass-03-candidate"
    spec_path: Path
    source_dir: Path
    out_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    prepare: tuple[tuple[str, ...], ...] = ()
    timeout_s: float | None = None
    built: BuiltRole | None = None  # the role's build this job runs on (native targets)
    gpus: tuple[int, ...] = ()  # host indices of the GPUs leased to this job
    # Paths the job's processes must not write (other roles' trees, the campaign...):
    # the local executor mounts them read-only where it can (runner.executors.isolation).
    readonly: tuple[Path, ...] = ()
    role: str = ""  # the spec's role: its compiler caches are its own (docker volumes)


@dataclass(frozen=True)
class BuildJob:
    """Build one role's tree once per round (a target with native code).

    ``commands`` (argv lists, cwd = the tree) build it; ``reuse`` is the role whose
    build this one takes over instead (the candidate of a change that touches no
    native or build file): then only ``changed`` files (paths relative to the tree;
    a missing one was deleted) are laid over that build.  ``env`` is the build's
    environment (GPU_ARCHS, ...); ``out_dir`` gets ``build.log``.
    """

    role: str
    round: int
    source_dir: Path
    out_dir: Path
    commands: tuple[tuple[str, ...], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    reuse: BuiltRole | None = None
    changed: tuple[str, ...] = ()
    reason: str = ""
    timeout_s: float | None = None


@dataclass(frozen=True)
class BuiltRole:
    """A role's built tree that the role's jobs run on.

    ``source_dir`` is the host tree the build came from; ``image`` the per-round image
    holding the built tree (docker; None: the tree itself was built in place);
    ``rebuilt`` False when the native build of another role was reused.
    """

    role: str
    source_dir: Path
    rebuilt: bool
    reason: str
    log_path: Path
    seconds: float
    image: str | None = None


@dataclass(frozen=True)
class JobOutcome:
    name: str
    returncode: int
    out_dir: Path
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and (self.out_dir / "benchmark.csv").is_file()


@dataclass
class LiveWorker:
    """A long-lived worker (``python -m runner.worker --serve``) started by an executor
    that supports them: its process with stdin/stdout pipes to the host, or, when its
    preparation failed, ``proc`` None and ``returncode`` set."""

    name: str
    out_dir: Path
    log_path: Path
    proc: subprocess.Popen[bytes] | None
    returncode: int | None = None


@runtime_checkable
class ServingExecutor(Protocol):
    """An executor that can also keep a worker alive for a whole round (paired,
    turn-taking measurement: ``runner.flow.paired``)."""

    name: str

    def run_job(self, job: WorkerJob) -> JobOutcome: ...

    def start_worker(self, job: WorkerJob) -> LiveWorker:
        """Prepare the job's tree like ``run_job`` and start the serving worker."""
        ...


class Executor(Protocol):
    """Runs worker jobs in fresh, isolated environments."""

    name: str

    def run_job(self, job: WorkerJob) -> JobOutcome:
        """Run the job to completion; never raises for a worker failure (the outcome
        says it), raises InfrastructureError when the environment itself broke."""
        ...

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """Build the role's tree once (or lay a change over another role's build);
        raises RoleBuildFailed with the build's log when the build fails."""
        ...

    def release_role(self, built: BuiltRole) -> None:
        """Free what ``prepare_role`` made (a per-round image); idempotent."""
        ...


class RoleBuildFailed(Exception):
    """Building a role's tree failed; ``log_path`` holds the build's output."""

    def __init__(self, message: str, log_path: Path) -> None:
        super().__init__(message)
        self.message = message
        self.log_path = log_path
