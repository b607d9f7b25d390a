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
import math
import os
import shlex
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.core import processes as cmd
from runner.core.errors import ConfigError, InfrastructureError
from runner.core.spec import write_json_atomic
from runner.executors.base import BuildJob, BuiltRole, JobOutcome, WorkerJob
from runner.executors.container import (
    CONTAINER_OUT,
    CONTAINER_SPEC,
    CONTAINER_SRC,
    CONTAINER_TARGET,
    VISIBILITY,
    bind_mount,
    containment_args,
    safe_name,
    translate_env,
)
from runner.executors.local import SOURCE_ENV, clean_env
from runner.executors.slurm_parse import (
    BAD_STATES,
    all_final,
    parse_job_id,
    parse_scontrol,
    state_by_task,
)

log = logging.getLogger("runner.executors.slurm")

TASK_SCRIPT = "slurm-task.sh"
SLURM_JSON = "slurm.json"
EXIT_FILE = "exit_code"
LOG_NAME = "job.log"
LOST_RC = 125  # no exit record: cancelled, timed out, node lost before the worker ended
NO_CSV_RC = 126  # the worker said 0 but left no benchmark.csv
STATE_RC = 1  # Slurm says the job failed although the worker's record says 0
_IMAGE_GPU_ARGS = {
    "none": "",
    # Slurm's gres sets these in the task; docker must hand the same GPUs on.
    "nvidia": '--gpus "\\"device=${CUDA_VISIBLE_DEVICES}\\""',
    # the node's numeric video/render groups, so the unprivileged user opens the nodes
    "amd": "--device /dev/kfd --device /dev/dri "
    '$(for g in video render; do getent group "$g" | cut -d: -f3 | sed "s/^/--group-add /"; done) '
    '-e "ROCR_VISIBLE_DEVICES=${ROCR_VISIBLE_DEVICES:-}"',
}


@dataclass(frozen=True)
class SlurmSettings:
    """The sbatch options of every submission."""

    partition: str | None = None
    account: str | None = None
    time_limit: str = "00:30:00"
    gres: str | None = None
    extra_args: tuple[str, ...] = ()
    array_limit: int | None = None  # at most this many array tasks at once


# ---- pure: the exact argv and scripts ------------------------------------------------
def time_limit(settings: SlurmSettings, timeout_s: float | None) -> str:
    """``--time``: the job's own timeout (whole minutes, rounded up) wins."""
    if timeout_s is None:
        return settings.time_limit
    return str(max(1, math.ceil(timeout_s / 60)))


def sbatch_args(
    script: Path,
    *,
    job_name: str,
    output: str,
    settings: SlurmSettings,
    timeout_s: float | None = None,
    array_size: int | None = None,
) -> list[str]:
    """The exact ``sbatch`` argv for one submission (pure)."""
    args = ["sbatch", "--parsable", f"--job-name={job_name}"]
    args += [f"--output={output}", "--export=NONE", "--ntasks=1"]
    args.append(f"--time={time_limit(settings, timeout_s)}")
    if settings.partition:
        args.append(f"--partition={settings.partition}")
    if settings.account:
        args.append(f"--account={settings.account}")
    if settings.gres:
        args.append(f"--gres={settings.gres}")
    if array_size is not None:
        limit = f"%{settings.array_limit}" if settings.array_limit else ""
        args.append(f"--array=0-{array_size - 1}{limit}")
    return [*args, *settings.extra_args, os.fspath(script)]


def task_env(job: WorkerJob) -> dict[str, str]:
    """The local executor's clean environment, minus the submitting shell's GPU
    visibility (on a cluster, Slurm's ``--gres`` decides which GPUs a task sees)."""
    env = clean_env(job)
    for key in VISIBILITY:
        if key not in job.env:
            env.pop(key, None)
    return env


def _exports(env: Mapping[str, str]) -> list[str]:
    return [f"export {key}={shlex.quote(value)}" for key, value in sorted(env.items())]


def _header(job: WorkerJob) -> list[str]:
    out = shlex.quote(os.fspath(job.out_dir))
    record = (
        'printf \'{"job_id": "%s", "array_job_id": "%s", "array_task_id": "%s", '
        '"node": "%s", "started": "%s"}\\n\' "${SLURM_JOB_ID:-}" "${SLURM_ARRAY_JOB_ID:-}" '
        '"${SLURM_ARRAY_TASK_ID:-}" "${SLURMD_NODENAME:-$(hostname)}" '
        f'"$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$out/{SLURM_JSON}"'
    )
    return [
        "#!/bin/bash",
        f"# turbo-campaign worker job {job.name} (written by runner.executors.slurm)",
        "set -u",
        f"out={out}",
        'mkdir -p "$out"',
        f'rm -f "$out/{EXIT_FILE}"',
        record,
        f'exec >"$out/{LOG_NAME}" 2>&1',
        'finish() { echo "$1" >"$out/' + EXIT_FILE + '"; exit "$1"; }',
    ]


def _native_body(job: WorkerJob, python: str) -> list[str]:
    lines = [f"cd {shlex.quote(os.fspath(job.source_dir))} || finish 1"]
    lines += _exports(task_env(job))
    for step in job.prepare:
        lines.append(f"echo '$ '{shlex.quote(shlex.join(step))}")
        lines.append(f'{shlex.join(step)} || finish "$?"')
    worker = [python, "-m", "runner.worker", os.fspath(job.spec_path), os.fspath(job.out_dir)]
    lines.append(f"echo '$ '{shlex.quote(shlex.join(worker))}")
    lines.append(shlex.join(worker))
    lines.append('finish "$?"')
    return lines


def docker_run_line(job: WorkerJob, image: str, image_gpus: str = "none") -> str:
    """The ``docker run`` shell line of an image task (pure): the docker executor's
    container (``runner.executors.container``: no network, never pulls, no
    capabilities, limits, the spec read-only and the out folder the only writable host
    path; a measuring job read-only as an unprivileged user), the source tree mounted
    read-only (copied inside first when ``prepare`` writes into it), plus the GPUs
    Slurm's gres gave the task."""
    mode: Literal["mount", "copy"] = "copy" if job.prepare else "mount"
    args = ["docker", "run", "--rm", "--init", "--pull", "never", "--network", "none"]
    args += ["--workdir", CONTAINER_TARGET]
    confine, env = containment_args(job, None, mode)
    args += confine
    if mode == "copy":
        args += ["--mount", bind_mount(job.source_dir, CONTAINER_SRC)]
    else:
        args += ["--mount", bind_mount(job.source_dir, CONTAINER_TARGET)]
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[SOURCE_ENV] = CONTAINER_TARGET  # the worker checks it measures this tree
    env |= translate_env(job)
    for key, value in sorted(env.items()):
        args += ["-e", f"{key}={value}"]
    inner = [f"mkdir -p {CONTAINER_TARGET}"]
    if job.prepare:
        inner.append(f"cp -a {CONTAINER_SRC}/. {CONTAINER_TARGET}/ && cd {CONTAINER_TARGET}")
        inner += [shlex.join(step) for step in job.prepare]
    inner.append(f"exec python3 -m runner.worker {CONTAINER_SPEC} {CONTAINER_OUT}")
    script = ["sh", "-c", "set -e\n" + "\n".join(inner)]
    gpu = _IMAGE_GPU_ARGS[image_gpus]
    name = '--name "tc-${SLURM_JOB_ID:-0}-$$"'
    return " ".join(
        x for x in (shlex.join(args[:3]), name, gpu, shlex.join([*args[3:], image, *script])) if x
    )


def _image_body(job: WorkerJob, image: str, image_gpus: str) -> list[str]:
    return [
        # a measuring container runs unprivileged (nobody when the task is root): it
        # must be able to write its artifacts into the out folder
        'chmod a+rwx "$out"',
        'ctr="tc-${SLURM_JOB_ID:-0}-$$"',
        "trap 'docker rm -f \"$ctr\" >/dev/null 2>&1' TERM",
        f"echo '$ '{shlex.quote(docker_run_line(job, image, image_gpus))}",
        docker_run_line(job, image, image_gpus) + " &",
        'wait "$!"',
        'finish "$?"',
    ]


def task_script(
    job: WorkerJob, *, python: str, image: str | None = None, image_gpus: str = "none"
) -> str:
    """The bash script of one worker task (pure)."""
    body = _image_body(job, image, image_gpus) if image else _native_body(job, python)
    return "\n".join([*_header(job), *body]) + "\n"


def array_script(manifest: Path) -> str:
    """The array's batch script: task ``SLURM_ARRAY_TASK_ID`` runs the task scripts of
    manifest line id+1 (tab-separated) one after another in its one allocation, so a
    shard's B C C B passes all run on the same GPU; it stops at the first failure."""
    quoted = shlex.quote(os.fspath(manifest))
    return (
        "#!/bin/bash\n"
        "# turbo-campaign job array (written by runner.executors.slurm)\n"
        "set -eu\n"
        f'line=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" {quoted})\n'
        'if [ -z "$line" ]; then echo "no task $SLURM_ARRAY_TASK_ID in the manifest" >&2; '
        "exit 2; fi\n"
        "IFS=$'\\t' read -r -a tasks <<<\"$line\"\n"
        'for task in "${tasks[@]}"; do /bin/bash "$task"; done\n'
    )


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
        spec = json.loads(job.spec_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return (spec.get("extra") or {}).get("mode") != "test"


def _check_shared(job: WorkerJob, shared_root: Path | None) -> None:
    if shared_root is None:
        return
    root = shared_root.resolve()
    for what, path in (
        ("out_dir", job.out_dir),
        ("spec", job.spec_path),
        ("source", job.source_dir),
    ):
        if root not in (path.resolve(), *path.resolve().parents):
            raise ConfigError(
                f"job {job.name}: {what} {path} is not under the shared filesystem {root}; "
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
    ) -> None:
        if image_gpus not in _IMAGE_GPU_ARGS:
            raise ConfigError(f"image_gpus {image_gpus!r}: use one of {sorted(_IMAGE_GPU_ARGS)}")
        self.settings = SlurmSettings(
            partition, account, time_limit, gres, tuple(extra_args), array_limit
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
        for stale in (EXIT_FILE, SLURM_JSON):
            (job.out_dir / stale).unlink(missing_ok=True)
        path = job.out_dir / TASK_SCRIPT
        text = task_script(job, python=self.python, image=self.image, image_gpus=self.image_gpus)
        path.write_text(text, encoding="utf-8")
        path.chmod(0o755)
        return path

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """Without an image: the role's tree (on the shared filesystem) is built in
        place on the submit host, as the local executor does.  Building inside an image
        on the compute nodes is not supported yet."""
        if self.image:
            raise ConfigError(
                "the slurm executor cannot build a native target inside an image yet; "
                "use --executor docker (or slurm without an image, building in place)"
            )
        from runner.executors.local import LocalExecutor

        return LocalExecutor(self.python).prepare_role(build)

    def release_role(self, built: BuiltRole) -> None:
        """Nothing to free: the build lives in the role's worktree."""

    def run_job(self, job: WorkerJob) -> JobOutcome:
        script = self._write_task(job)
        job_name = _job_name(job.name)
        argv = sbatch_args(
            script,
            job_name=job_name,
            output=os.fspath(job.out_dir / "slurm-%j.out"),
            settings=self.settings,
            timeout_s=job.timeout_s,
        )
        job_id = self._submit(argv, job_name)
        states = self._wait(job_id)
        return self._outcome(job, states.get(None) or states.get("0"), job_id, argv)

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
        manifest.write_text("".join("\t".join(line) + "\n" for line in scripts), encoding="utf-8")
        batch = folder / f"slurm-array-{uid}.sh"
        batch.write_text(array_script(manifest), encoding="utf-8")
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
        has_csv = (job.out_dir / "benchmark.csv").is_file()
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
