"""What the Slurm executor submits (pure): the sbatch argv, each task's bash script
(native, or the docker run of an image task) and the array script that runs a shard's
tasks in order."""

from __future__ import annotations

import math
import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.core.spec import SOURCE_ENV
from runner.core.startup import isolated_python
from runner.executors.base import BuildJob, WorkerJob
from runner.executors.container import (
    CONTAINER_OUT,
    CONTAINER_SCRATCH,
    CONTAINER_SPEC,
    CONTAINER_SRC,
    CONTAINER_TARGET,
    DEFAULT_MEMORY,
    DEFAULT_PIDS_LIMIT,
    NOBODY,
    VISIBILITY,
    bind_mount,
    containment_args,
    translate_env,
)
from runner.executors.isolation import shell_prefix
from runner.executors.local import clean_env, with_interpreter
from runner.store.leftovers import job_comment

TASK_SCRIPT = "slurm-task.sh"
SLURM_JSON = "slurm.json"


EXIT_FILE = "exit_code"


LOG_NAME = "job.log"


BUILD_SCRIPT = "slurm-build.sh"


BUILD_TASK_LOG = "build-task.log"


IMAGE_GPU_ARGS = {
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
    # the campaign the jobs belong to: with the submitting pid in ``--comment``, so the
    # next command of that campaign cancels the jobs of a killed one (leftovers)
    campaign: str | None = None


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
    if settings.campaign:
        args.append(f"--comment={job_comment(settings.campaign, os.getpid())}")
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


def _header(name: str, out_dir: Path, log_name: str = LOG_NAME) -> list[str]:
    """The task's start: its record (``slurm.json``), its log, and ``finish CODE``
    (the exit-code file the submit host reads)."""
    out = shlex.quote(os.fspath(out_dir))
    record = (
        'printf \'{"job_id": "%s", "array_job_id": "%s", "array_task_id": "%s", '
        '"node": "%s", "started": "%s"}\\n\' "${SLURM_JOB_ID:-}" "${SLURM_ARRAY_JOB_ID:-}" '
        '"${SLURM_ARRAY_TASK_ID:-}" "${SLURMD_NODENAME:-$(hostname)}" '
        f'"$(date -u +%Y-%m-%dT%H:%M:%SZ)" > "$out/{SLURM_JSON}"'
    )
    return [
        "#!/bin/bash",
        f"# turbo-campaign {name} (written by runner.executors.slurm)",
        "set -u",
        f"out={out}",
        'mkdir -p "$out"',
        f'rm -f "$out/{EXIT_FILE}"',
        record,
        f'exec >"$out/{log_name}" 2>&1',
        'finish() { echo "$1" >"$out/' + EXIT_FILE + '"; exit "$1"; }',
    ]


def _native_body(job: WorkerJob, python: str) -> list[str]:
    """The task on the node itself: in the job's read-only mount namespace where the
    node can make one (``runner.executors.isolation.shell_prefix``), as a local job."""
    lines = [f"cd {shlex.quote(os.fspath(job.source_dir))} || finish 1"]
    lines += _exports(task_env(job))
    writable = [job.out_dir, *([job.jit_cache] if job.jit_cache else [])]
    lines += shell_prefix(job.readonly, writable, job.hidden)
    for step in job.prepare:
        lines.append(f"echo '$ '{shlex.quote(shlex.join(step))}")
        lines.append(f'"${{iso[@]}}" {shlex.join(step)} || finish "$?"')
    args = [os.fspath(job.spec_path), os.fspath(job.out_dir)]
    shown = [python, "-m", "runner.worker", *args]  # started isolated (runner.core.startup)
    lines.append(f"echo '$ '{shlex.quote(shlex.join(shown))}")
    lines.append(f'"${{iso[@]}}" {shlex.join(isolated_python(python, "runner.worker", args))}')
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
    gpu = IMAGE_GPU_ARGS[image_gpus]
    name = '--name "tc-${SLURM_JOB_ID:-0}-$$"'
    return " ".join(
        x for x in (shlex.join(args[:3]), name, gpu, shlex.join([*args[3:], image, *script])) if x
    )


def _image_body(job: WorkerJob, image: str, image_gpus: str) -> list[str]:
    return [
        # a measuring container runs as the task's user, or as nobody when the task is
        # root (``container.worker_user``): that user must own the out folder it writes
        f'[ "$(id -u)" != 0 ] || chown {NOBODY} "$out"',
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
    return "\n".join([*_header(f"worker job {job.name}", job.out_dir), *body]) + "\n"


def build_run_line(build: BuildJob, image: str) -> str:
    """The ``docker run`` shell line that builds one role's tree in place inside
    ``image`` (pure): the tree (on the shared filesystem) the only host path mounted,
    writable, at the worker's ``/workspace/target``, so the products land where the
    role's jobs later mount it read-only; no network, never pulls, no capabilities, the
    task's own user (the tree's owner), the build's environment (GPU_ARCHS, ...)."""
    args = ["docker", "run", "--rm", "--init", "--pull", "never", "--network", "none"]
    args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    args += ["--pids-limit", str(DEFAULT_PIDS_LIMIT), "--memory", DEFAULT_MEMORY]
    args += ["--workdir", CONTAINER_TARGET]
    args += ["--mount", bind_mount(build.source_dir, CONTAINER_TARGET, readonly=False)]
    env = {"HOME": CONTAINER_SCRATCH, **build.env}
    for key, value in sorted(env.items()):
        args += ["-e", f"{key}={value}"]
    # python/pip are the image's python3
    inner = ["set -e", *(shlex.join(with_interpreter(c, "python3")) for c in build.commands)]
    script = ["sh", "-c", "\n".join(inner)]
    name = '--name "tc-build-${SLURM_JOB_ID:-0}-$$"'
    user = '--user "$(id -u):$(id -g)"'
    return " ".join((shlex.join(args[:3]), name, user, shlex.join([*args[3:], image, *script])))


def build_task_script(build: BuildJob, image: str) -> str:
    """The bash script of one role's build task in ``image`` (pure)."""
    line = build_run_line(build, image)
    body = [
        'ctr="tc-build-${SLURM_JOB_ID:-0}-$$"',
        "trap 'docker rm -f \"$ctr\" >/dev/null 2>&1' TERM",
        f"echo '$ '{shlex.quote(line)}",
        line + " &",
        'wait "$!"',
        'finish "$?"',
    ]
    header = _header(f"build of the {build.role} tree", build.out_dir, BUILD_TASK_LOG)
    return "\n".join([*header, *body]) + "\n"


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
