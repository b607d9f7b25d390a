"""The executor seam: run one worker job in an isolated environment.

A job is a round spec (JSON) plus the source tree to measure; the worker writes its
artifacts into a folder the host owns.  Local, docker and slurm executors implement
``Executor.run_job`` and are otherwise interchangeable.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.cgroup import NO_CGROUP, ForeignClock, WorkerCgroup
from runner.core.lifeline import kill_group

if TYPE_CHECKING:
    from runner.executors.build_cache import BuildCache


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
    # Folders the job's processes must not read (the campaign's sealed folder): the
    # local executor covers them with an empty file system where it can.
    hidden: tuple[Path, ...] = ()
    role: str = ""  # the spec's role: its compiler caches are its own (docker volumes)
    # The role's own JIT cache folder on the host (runner.executors.jit_cache): a local
    # job's Triton/Inductor/CUDA caches, writable to it alone.
    jit_cache: Path | None = None


@dataclass(frozen=True)
class BuildJob:
    """Build one role's tree, once per build key (a target with native code).

    ``key`` is the build key (``runner.executors.build_cache.build_key``); ``cache``
    the build cache: a whole, intact entry of ``key`` is laid under the tree (its build
    products, the tree's own files kept: "hit"), otherwise ``commands`` (argv lists,
    cwd = the tree) compile it ("compile") and the build is stored under ``key``.
    ``env`` is the build's environment (GPU_ARCHS, ...); ``out_dir`` gets
    ``build.log``; ``keep`` are the keys the round still uses (never evicted);
    ``readonly`` what its commands may not write (the other roles' trees).
    """

    role: str
    round: int
    source_dir: Path
    out_dir: Path
    key: str
    cache: BuildCache
    commands: tuple[tuple[str, ...], ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float | None = None
    built_from: str = ""  # "campaign c, round N, role r": recorded in a new entry
    keep: tuple[str, ...] = ()
    # What the build's processes must not write (the other roles' trees...), as for
    # its jobs: the local build runs with them read-only (runner.executors.isolation).
    readonly: tuple[Path, ...] = ()
    hidden: tuple[Path, ...] = ()  # what it may not read, as for its jobs


@dataclass(frozen=True)
class BuiltRole:
    """A role's built tree that the role's jobs run on.

    ``source_dir`` is the host tree the build came from; ``image`` the image holding
    the built tree (docker; None: the tree itself holds the build); ``outcome``
    "compile" (compiled now), "hit" (an earlier build of the same key, from the cache)
    or "reuse" (another role of this round had the same key); ``reason`` why it was
    compiled (no entry, or a corrupted one) and then why it was built so (the round's
    records); ``cached_image`` True
    when ``image`` is the cache's own (never removed with the round).
    """

    role: str
    source_dir: Path
    outcome: str
    reason: str
    log_path: Path
    seconds: float
    image: str | None = None
    key: str = ""
    cached_image: bool = False

    @property
    def rebuilt(self) -> bool:
        return self.outcome == "compile"


@dataclass(frozen=True)
class JobOutcome:
    name: str
    returncode: int
    out_dir: Path
    log_path: Path

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and (self.out_dir / BENCHMARK_CSV).is_file()


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
    # whether ``proc`` leads the worker's own process group, so the host can stop it
    # whole (SIGSTOP: the worker and what it started in its group) while another worker
    # takes a timed turn; a container's client process is not that (a container worker
    # stops its container instead: ``runner.executors.container_worker``)
    stoppable: bool = False
    # the worker's own cgroup (``runner.core.cgroup``), where the host could make one
    cgroup: WorkerCgroup | None = None
    # why the cgroup CPU guard reads nothing for it, where it has no cgroup
    guard_off: str = NO_CGROUP

    def cpu_clock(self) -> tuple[ForeignClock | None, str]:
        """The cgroup CPU guard's clock for one timed turn: the cgroup's CPU time
        beyond the worker's own process tree; or None and why there is none."""
        if self.cgroup is not None and self.proc is not None:
            return ForeignClock(self.cgroup, self.proc.pid), ""
        return None, self.guard_off

    def pause(self) -> bool:
        """Stop the worker whole while another worker takes a timed turn: SIGSTOP to its
        process group where ``stoppable``.  False where nothing was stopped (not
        stoppable, or ended); the caller waits for the group's threads
        (``runner.core.lifeline.wait_stopped``)."""
        if not self.stoppable or self.proc is None or self.proc.poll() is not None:
            return False
        kill_group(self.proc.pid, signal.SIGSTOP)
        return True

    def resume(self) -> None:
        """Continue a worker ``pause`` stopped."""
        if self.proc is not None:
            kill_group(self.proc.pid, signal.SIGCONT)

    def release(self) -> None:
        """What the worker leaves once it has ended: what is left in its cgroup (a
        helper it detached) killed and the cgroup removed."""
        if self.cgroup is not None:
            self.cgroup.kill()
            self.cgroup.remove()


@runtime_checkable
class SequenceExecutor(Protocol):
    """An executor that runs several sequences of jobs side by side, each sequence in
    order in one allocation (Slurm: one array task per shard; ``runner.compare.loop``)."""

    name: str

    def submit_sequences(
        self, sequences: Sequence[Sequence[WorkerJob]], work_dir: Path | None = None
    ) -> list[list[JobOutcome]]: ...


@runtime_checkable
class ServingExecutor(Protocol):
    """An executor that can also keep a worker alive for a whole round (paired,
    turn-taking measurement: ``runner.measure.paired``)."""

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

    def build_identity(self) -> str:
        """What of the build environment determines a build (docker: the image id;
        locally: the compiler and the Python), part of the build key."""
        ...

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """Lay the cached build of ``build.key`` under the role's tree, or compile it
        and store it; raises MeasurementFailed with the build's log when it fails."""
        ...

    def release_role(self, built: BuiltRole) -> None:
        """Free what ``prepare_role`` made (a per-round image); idempotent."""
        ...
