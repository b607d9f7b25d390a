"""What a measurement needs from the round it runs in: the ``Host`` protocol.

``runner.round.context.RoundPlan`` is the host of every campaign round; ``PlainHost``
is one without a campaign (benchmarks and tests), every spec a template with the role,
pass index and shapes filled in.  The paired engine (``runner.measure.paired``) and the
sharded passes (``runner.measure.sharding``) take a ``Host``; ``job_in`` is how both kinds
of host place a worker's job in the round's scratch folder.

Host-side and worker-safe: no pydantic, no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from runner.core.artifact_names import MEMORY
from runner.core.device_memory import MemoryLog
from runner.core.files import read_json
from runner.core.spec import RoundSpec, save_spec
from runner.core.step_times import StepTimes
from runner.executors.base import BuiltRole, Executor, JobOutcome, WorkerJob


class Host(Protocol):
    """What paired and sharded measurement need from a round: its scratch folder, its
    executor, whether it measures a GPU, the spec of a worker and a job to start
    (serving) or to run (a pass).  The work beside the workers is no part of it: the
    caller hands that over with each measurement (``runner.measure.beside``)."""

    @property
    def tmp(self) -> Path: ...

    @property
    def times(self) -> StepTimes:
        """The wall time of each step (worker start-up, turns, ...)."""
        ...

    @property
    def executor(self) -> Executor: ...

    @property
    def gpu_target(self) -> bool: ...

    @property
    def short_turns(self) -> bool:
        """Whether serving workers take short turns (``runner.measure.paired.block_timing``):
        a quick round or the acceptance, on a GPU target."""
        ...

    @property
    def memory_prior(self) -> MemoryLog | None:
        """An earlier paired session's device-memory reports on this machine
        (``runner.core.artifact_names.MEMORY_LOG``), or None."""
        ...

    @property
    def device_bytes(self) -> int | None:
        """The memory of the device the workers measure on (bytes; None: not limited
        or not known), which paired sessions plan their pools and waves against."""
        ...

    @property
    def template(self) -> RoundSpec:
        """The spec every pass fills in (``RoundSpec.for_pass``)."""
        ...

    def worker_job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> WorkerJob: ...


def read_memory_log(path: Path) -> MemoryLog | None:
    """A paired session's memory reports (``runner.core.artifact_names.MEMORY_LOG``), or None
    when the file is missing or unreadable or not a JSON object (then nothing is assumed);
    read leniently (``MemoryLog.from_dict``)."""
    return MemoryLog.from_dict(read_json(path))


def run_job(
    host: Host,
    name: str,
    spec: RoundSpec,
    tree: Path,
    env: Mapping[str, str] | None = None,
    gpu: int | None = None,
) -> JobOutcome:
    """One worker job (a pass, the focused test) of ``host`` run to its end by its
    executor: a campaign's ``RoundPlan`` and a ``PlainHost`` alike."""
    return host.executor.run_job(host.worker_job(name, spec, tree, env, gpu))


def job_in(
    tmp: Path,
    name: str,
    spec: RoundSpec,
    tree: Path,
    env: Mapping[str, str],
    gpu: int | None = None,
    built: BuiltRole | None = None,
) -> WorkerJob:
    """A worker job in a round's scratch folder ``tmp``: its spec saved as
    ``specs/<name>.json``, its artifacts in ``<name>/``, on ``gpu`` when given."""
    spec_path = tmp / "specs" / f"{name}.json"
    save_spec(spec_path, spec)
    gpus = () if gpu is None else (gpu,)
    return WorkerJob(
        name, spec_path, tree, tmp / name, env=dict(env), built=built, gpus=gpus, role=spec.role
    )


@dataclass
class PlainManifest:
    """The manifest fields measuring reads, for measurements without a campaign: the
    pinned CSV header, the metric a pair's reading is scored by and each shape's
    recorded seconds (shards balanced by them)."""

    pinned_header: str | None = None
    primary_metric: str = "auto"
    shape_seconds: dict[str, float] = field(default_factory=dict)


@dataclass
class PlainHost:
    """A Host without a campaign (benchmarks, tests): every spec is ``template``
    with the role, pass index and shapes filled in; ``job_env(tree)`` is the target's
    environment for a tree (e.g. ``PYTHONPATH`` for the example package).  With its
    GPUs, round number, level and ``manifest`` it is also what the compare loop
    measures through (``runner.compare.loop.MeasurePlan``, as a campaign's round plan
    is); what that says is kept in ``said``."""

    tmp: Path
    executor: Executor
    template: RoundSpec
    job_env: Callable[[Path], dict[str, str]] = field(default=lambda tree: {})
    device_bytes: int | None = None  # the device's memory, when the caller knows it
    times: StepTimes = field(default_factory=StepTimes)  # each step's wall time
    gpus: tuple[int, ...] = ()  # several: one shard of the shapes per GPU
    round: int = 2  # names the progress lines, seeds the turn order
    level: str = "full"  # the measuring cap the progress estimates against
    manifest: PlainManifest = field(default_factory=PlainManifest)
    said: list[str] = field(default_factory=list)

    def progress(self, message: str) -> None:
        self.said.append(message)

    @property
    def gpu_target(self) -> bool:
        """Whether the work is meant for a GPU (``template.device`` is not "cpu")."""
        return self.template.device != "cpu"

    @property
    def short_turns(self) -> bool:
        return self.template.level == "quick" and self.gpu_target

    @property
    def memory_prior(self) -> MemoryLog | None:
        """What an earlier measurement in the same scratch folder left (``memory.json``)."""
        return read_memory_log(self.tmp / MEMORY)

    def worker_job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> WorkerJob:
        return job_in(self.tmp, name, spec, tree, {**self.job_env(tree), **(env or {})}, gpu)
