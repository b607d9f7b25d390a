"""Slurm executor: each worker job is a Slurm batch job (shards: one job array).

Submission: ``sbatch --parsable`` for a single job and for an array alike, rather
than ``srun``: the batch script stays in the job's ``out_dir`` (the exact thing that
ran, rerunnable with ``sbatch``), arrays need ``sbatch`` anyway, and nothing ties the
job to the submitting terminal's I/O.  Not ``--wait``: sbatch's own wait loop sleeps
2, 8, then 32 s between checks whenever ``MinJobAge`` >= 64 s (every real cluster;
measured: a 10 s job took 42 s), so the executor polls ``scontrol show job -o ID``
every ``poll_s`` seconds itself until every task is in a final state.

``--export=NONE``: the script exports the same short allow-list of variables the
local executor passes (plus the job's own), so the submitter's shell does not leak
into a measurement; GPU visibility comes from Slurm's ``--gres`` allocation, never
from the submitting shell.

Files: the campaign's filesystem is shared between the submit host and the nodes,
so ``out_dir``, ``spec_path`` and ``source_dir`` must be on it (``shared_root`` checks
it).  Each task writes into its ``out_dir``: ``slurm-task.sh`` (by the host),
``slurm.json`` (job id, array ids, node, start; the host adds the final state),
``job.log`` (the worker's output), ``exit_code`` (the worker's exit status, written
by the task script after the worker returns) and the worker's own artifacts.

Outcome: accounting may be off (``accounting_storage/none``, no ``sacct``), so the
task's own ``exit_code`` file is the primary record; the final ``JobState`` from
``scontrol show job`` (kept for ``MinJobAge`` seconds) overrides it when the job was
CANCELLED/FAILED/TIMEOUT/NODE_FAIL/...  No exit record (the task was killed before it
wrote one) gives ``LOST_RC``, and a measuring job without ``benchmark.csv`` gives
``NO_CSV_RC``, so a partial shard is never gated.  Ctrl-C while waiting cancels the
job (``scancel ID``, or ``scancel --name`` during the submission itself: every
submission has a unique job name) and re-raises.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from runner.core import processes as cmd
from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.errors import ConfigError, InfrastructureError, MeasurementFailed
from runner.core.files import write_atomic, write_json_atomic
from runner.core.spec import load_spec
from runner.executors.base import BuildJob, BuiltRole, JobOutcome, WorkerJob
from runner.executors.container import (
    safe_name,
)
from runner.executors.slurm_parse import (
    BAD_STATES,
    all_final,
    parse_job_id,
    parse_scontrol,
    state_by_task,
)
from runner.executors.slurm_scripts import (
    BUILD_SCRIPT,
    BUILD_TASK_LOG,
    EXIT_FILE,
    IMAGE_GPU_ARGS,
    LOG_NAME,
    SLURM_JSON,
    TASK_SCRIPT,
    SlurmSettings,
    array_script,
    build_task_script,
    sbatch_args,
    task_script,
)

log = logging.getLogger("runner.executors.slurm")

LOST_RC = 125  # no exit record: cancelled, timed out, node lost before the worker ended
NO_CSV_RC = 126  # the worker said 0 but left no benchmark.csv
STATE_RC = 1  # Slurm says the job failed although the worker's record says 0


def task_returncode(
    exit_text: str | None, state: str | None, has_csv: bool, needs_csv: bool
) -> int:
    """One task's JobOutcome.returncode (see the module docstring)."""
    code = int(exit_text) if exit_text and exit_text.strip().lstrip("-").isdigit() else None
    if code is None:
        return LOST_RC
    if state is not None and state.split()[0] in BAD_STATES:
        return code or STATE_RC
    if code == 0 and needs_csv and not has_csv:
        return NO_CSV_RC
    return code


def _needs_csv(job: WorkerJob) -> bool:
    """A measuring pass must leave benchmark.csv; a test-mode job (focused test,
    quick script) does not."""
    try:
        spec = load_spec(job.spec_path)
    except (ConfigError, KeyError, TypeError, ValueError):
        return True
    return spec.mode != "test"


def _check_shared(job: WorkerJob, shared_root: Path | None) -> None:
    _check_paths(
        job.name,
        (("out_dir", job.out_dir), ("spec", job.spec_path), ("source", job.source_dir)),
        shared_root,
    )


def _check_paths(name: str, paths: Sequence[tuple[str, Path]], shared_root: Path | None) -> None:
    if shared_root is None:
        return
    root = shared_root.resolve()
    for what, path in paths:
        if root not in (path.resolve(), *path.resolve().parents):
            raise ConfigError(
                f"job {name}: {what} {path} is not under the shared filesystem {root}; "
                "put the campaign (and its round temp folder and worktrees) on a filesystem "
                "every node mounts"
            )


# ---- the executor --------------------------------------------------------------------
class SlurmExecutor:
    """Runs each worker job as a Slurm batch job; ``submit_array`` runs several as
    one job array (shards)."""

    name = "slurm"

    def __init__(
        self,
        partition: str | None = None,
        account: str | None = None,
        time_limit: str = "00:30:00",
        gres: str | None = None,
        image: str | None = None,
        extra_args: Sequence[str] = (),
        *,
        python: str | None = None,
        image_gpus: str = "none",
        shared_root: Path | None = None,
        array_limit: int | None = None,
        poll_s: float = 1.0,
        unreachable_s: float = 300.0,
        campaign: str | None = None,
    ) -> None:
        if image_gpus not in IMAGE_GPU_ARGS:
            raise ConfigError(f"image_gpus {image_gpus!r}: use one of {sorted(IMAGE_GPU_ARGS)}")
        self.settings = SlurmSettings(
            partition, account, time_limit, gres, tuple(extra_args), array_limit, campaign
        )
        self.image = image
        self.python = python or sys.executable  # the same venv path on the shared FS
        self.image_gpus = image_gpus
        self.shared_root = shared_root
        self.poll_s = poll_s
        self.unreachable_s = unreachable_s

    def _write_task(self, job: WorkerJob) -> Path:
        _check_shared(job, self.shared_root)
        job.out_dir.mkdir(parents=True, exist_ok=True)
        if job.jit_cache is not None:  # writable in the task's namespace: it must exist
            job.jit_cache.mkdir(parents=True, exist_ok=True)
        for stale in (EXIT_FILE, SLURM_JSON):
            (job.out_dir / stale).unlink(missing_ok=True)
        path = job.out_dir / TASK_SCRIPT
        text = task_script(job, python=self.python, image=self.image, image_gpus=self.image_gpus)
        write_atomic(path, text)
        path.chmod(0o755)
        return path

    def build_identity(self) -> str:
        """The image the tree is built in, or the submit host's toolchain (the tree is
        built there, without an image)."""
        from runner.executors.local import toolchain

        return f"image {self.image}" if self.image else toolchain(self.python)

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """The role's tree (on the shared filesystem) built in place, through the build
        cache under the campaigns root (a path every node shares): without an image on
        the submit host, as the local executor does; with one, as a Slurm job that
        builds the tree inside the image on a node (``build_task_script``), so the
        products are the image's toolchain's and lie where the role's jobs mount the
        tree read-only."""
        from runner.executors.local import LocalExecutor, build_in_place

        if not self.image:
            return LocalExecutor(self.python).prepare_role(build)
        return build_in_place(build, self._compile_in_image, self.name)

    def _compile_in_image(self, build: BuildJob, log: TextIO, log_path: Path) -> None:
        """One Slurm job runs the build commands in a container of the image; its log
        is appended to ``log``; a failed or lost build raises MeasurementFailed."""
        assert self.image is not None
        name = f"build-r{build.round}-{build.role}"
        _check_paths(
            name, (("tree", build.source_dir), ("out_dir", build.out_dir)), self.shared_root
        )
        for stale in (EXIT_FILE, SLURM_JSON, BUILD_TASK_LOG):
            (build.out_dir / stale).unlink(missing_ok=True)
        script = build.out_dir / BUILD_SCRIPT
        write_atomic(script, build_task_script(build, self.image))
        script.chmod(0o755)
        job_id, argv, states = self._batch(script, name, build.out_dir, build.timeout_s)
        state = states.get(None)
        exit_path = build.out_dir / EXIT_FILE
        exit_text = exit_path.read_text(encoding="utf-8") if exit_path.is_file() else None
        rc = task_returncode(exit_text, state, has_csv=False, needs_csv=False)
        task_log = build.out_dir / BUILD_TASK_LOG
        text = task_log.read_text(encoding="utf-8", errors="replace") if task_log.is_file() else ""
        log.write(f"$ {' '.join(argv)}\n(Slurm job {job_id}, state {state})\n{text}\n")
        if rc != 0:
            raise MeasurementFailed(
                f"building the {build.role} tree in image {self.image} failed (Slurm job "
                f"{job_id}, state {state or 'unknown'}, exit {rc}): {script}",
                log_path,
            )

    def release_role(self, built: BuiltRole) -> None:
        """Nothing to free: the build lives in the role's worktree."""

    def run_job(self, job: WorkerJob) -> JobOutcome:
        script = self._write_task(job)
        job_id, argv, states = self._batch(script, job.name, job.out_dir, job.timeout_s)
        return self._outcome(job, states.get(None) or states.get("0"), job_id, argv)

    def _batch(
        self, script: Path, name: str, out_dir: Path, timeout_s: float | None
    ) -> tuple[str, list[str], dict[str | None, str]]:
        """One plain batch job of ``script`` (its output in ``out_dir``), waited for:
        its id, the sbatch argv and the final states."""
        job_name = _job_name(name)
        argv = sbatch_args(
            script,
            job_name=job_name,
            output=os.fspath(out_dir / "slurm-%j.out"),
            settings=self.settings,
            timeout_s=timeout_s,
        )
        job_id = self._submit(argv, job_name)
        return job_id, argv, self._wait(job_id)

    def submit_array(
        self, jobs: Sequence[WorkerJob], work_dir: Path | None = None
    ) -> list[JobOutcome]:
        """All ``jobs`` as one job array (``--array=0-N``); outcomes in job order."""
        return [o for seq in self.submit_sequences([[j] for j in jobs], work_dir) for o in seq]

    def submit_sequences(
        self, sequences: Sequence[Sequence[WorkerJob]], work_dir: Path | None = None
    ) -> list[list[JobOutcome]]:
        """One array task per sequence (a shard), its jobs run in order in the task's
        one allocation (one GPU with ``--gres=gpu:1``): paired passes stay on one GPU.
        A job after a failed one in its sequence never runs (LOST_RC)."""
        jobs = [job for seq in sequences for job in seq]
        if not jobs:
            return []
        scripts = [[os.fspath(self._write_task(job)) for job in seq] for seq in sequences]
        uid = uuid.uuid4().hex[:8]
        folder = work_dir or jobs[0].out_dir.parent
        folder.mkdir(parents=True, exist_ok=True)
        manifest = folder / f"slurm-array-{uid}.manifest"
        write_atomic(manifest, "".join("\t".join(line) + "\n" for line in scripts))
        batch = folder / f"slurm-array-{uid}.sh"
        write_atomic(batch, array_script(manifest))
        job_name = _job_name(f"array-{jobs[0].name}-{uid}")
        per_task = [sum(j.timeout_s or 0 for j in seq) for seq in sequences]
        argv = sbatch_args(
            batch,
            job_name=job_name,
            output=os.fspath(folder / "slurm-%A_%a.out"),
            settings=self.settings,
            timeout_s=max(per_task) or None,
            array_size=len(sequences),
        )
        job_id = self._submit(argv, job_name)
        states = self._wait(job_id)
        return [
            [self._outcome(job, states.get(str(i)), job_id, argv) for job in seq]
            for i, seq in enumerate(sequences)
        ]

    def _submit(self, argv: list[str], job_name: str) -> str:
        """sbatch; the job id.  Ctrl-C during the submission cancels by job name."""
        try:
            proc = cmd.run(argv, check=False)
        except KeyboardInterrupt:
            log.warning("interrupted: cancelling Slurm job %s", job_name)
            cmd.run(["scancel", f"--name={job_name}"], check=False)
            raise
        job_id = parse_job_id(proc.stdout or "") if proc.returncode == 0 else None
        if job_id is None:
            raise InfrastructureError(
                f"sbatch did not submit the job (exit {proc.returncode}):\n"
                f"{(proc.stdout or '')[-2000:]}\nCheck the partition/account/gres options and "
                "`sinfo`; on a test machine, `bash scripts/slurm-setup.sh` starts a cluster."
            )
        log.info("submitted Slurm job %s (%s)", job_id, job_name)
        return job_id

    def _wait(self, job_id: str) -> dict[str | None, str]:
        """Poll until every task is final; Ctrl-C cancels the job and re-raises."""
        try:
            return self._poll(job_id)
        except KeyboardInterrupt:
            log.warning("interrupted: cancelling Slurm job %s", job_id)
            cmd.run(["scancel", job_id], check=False)
            raise

    def _poll(self, job_id: str) -> dict[str | None, str]:
        """Final JobState per array task id (None for a plain job); empty when Slurm
        no longer knows the job (then the exit-code files decide alone)."""
        failing_since: float | None = None
        while True:
            proc = cmd.run(["scontrol", "show", "job", "-o", job_id], check=False)
            out = proc.stdout or ""
            if proc.returncode == 0:
                failing_since = None
                states = state_by_task(parse_scontrol(out))
                if all_final(states):
                    return states
            elif "Invalid job id" in out:
                return {}  # purged (MinJobAge passed): the exit-code files decide
            else:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > self.unreachable_s:
                    raise InfrastructureError(
                        f"scontrol cannot reach slurmctld for {self.unreachable_s:.0f} s while "
                        f"waiting for job {job_id}:\n{out[-1000:]}\nCheck `scontrol ping`; "
                        f"the job may still run (cancel it with `scancel {job_id}`)."
                    )
            time.sleep(self.poll_s)

    def _outcome(
        self, job: WorkerJob, state: str | None, job_id: str, argv: list[str]
    ) -> JobOutcome:
        exit_path = job.out_dir / EXIT_FILE
        exit_text = exit_path.read_text(encoding="utf-8") if exit_path.exists() else None
        has_csv = (job.out_dir / BENCHMARK_CSV).is_file()
        rc = task_returncode(exit_text, state, has_csv, _needs_csv(job))
        self._record(job, job_id, state, rc, argv)
        return JobOutcome(job.name, rc, job.out_dir, job.out_dir / LOG_NAME)

    def _record(
        self, job: WorkerJob, job_id: str, state: str | None, rc: int, argv: list[str]
    ) -> None:
        path = job.out_dir / SLURM_JSON
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            record = {"job_id": job_id, "node": None}  # the task never started
        record.update({"submitted_job_id": job_id, "state": state, "returncode": rc})
        record["sbatch"] = argv
        record["image"] = self.image
        write_json_atomic(path, record)


def _job_name(name: str) -> str:
    return f"tc-{safe_name(name, 60)}-{uuid.uuid4().hex[:8]}"
