"""The exact docker argv the docker executor sends (pure): a job's ``docker create``, a
role build's container and its script, the per-round image tag, and the one-command
``docker run`` kept for the record."""

from __future__ import annotations

import os
import shlex
import uuid
from collections.abc import Sequence

from runner.core.spec import SOURCE_ENV
from runner.executors.base import BuildJob, WorkerJob
from runner.executors.container import (
    CONTAINER_OUT,
    CONTAINER_SPEC,
    CONTAINER_TARGET,
    DEFAULT_PIDS_LIMIT,
    GpuRequest,
    SourceMode,
    bind_mount,
    containment_args,
    job_script,
    resolve_source_mode,
    safe_name,
    translate_env,
)

CONTAINER_INCOMING = "/workspace/incoming"


BUILD_REPO = "turbo-campaign-build"


TRITON_CACHE = "/cache/triton"


CCACHE = "/cache/ccache"


DEFAULT_COMMAND: tuple[str, ...] = ("python3", "-m", "runner.worker", CONTAINER_SPEC, CONTAINER_OUT)


def container_name(job_name: str) -> str:
    return f"turbo-campaign-{safe_name(job_name)}-{uuid.uuid4().hex[:8]}"


def cache_volumes(campaign: str, role: str = "") -> dict[str, str]:
    """Named volume -> mount point; per campaign and role, shared by that role's jobs
    of every round: no role's compiler cache can be filled by another's processes (a
    candidate writing a slow binary under the incumbent's kernel key)."""
    prefix = f"turbo-campaign-{safe_name(campaign)}" + (f"-{safe_name(role)}" if role else "")
    return {f"{prefix}-triton": TRITON_CACHE, f"{prefix}-ccache": CCACHE}


PID_LABEL = "turbo-campaign.pid"


def docker_create_args(
    job: WorkerJob,
    image: str,
    gpu: GpuRequest | None,
    *,
    name: str,
    campaign: str,
    caches: bool = True,
    command: Sequence[str] = DEFAULT_COMMAND,
    source_mode: SourceMode = "auto",
) -> list[str]:
    """The exact ``docker create`` argv for one job (pure)."""
    args = ["docker", "create", "--name", name, "--init", "--pull", "never"]
    args += ["--network", "none", "--workdir", CONTAINER_TARGET]
    args += ["--label", f"turbo-campaign.campaign={campaign}"]
    args += ["--label", f"turbo-campaign.job={job.name}"]
    args += ["--label", f"{PID_LABEL}={os.getpid()}"]
    if gpu is not None:
        args += gpu.docker_args()
    mode = resolve_source_mode(job, source_mode)
    confine, env = containment_args(job, gpu, mode)
    args += confine
    if caches:
        for volume, target in cache_volumes(campaign, job.role).items():
            args += ["--mount", f"type=volume,source={volume},target={target}"]
        env |= {"TRITON_CACHE_DIR": TRITON_CACHE, "CCACHE_DIR": CCACHE}
    if job.built is not None and job.built.image:
        image = job.built.image  # the role's built tree is in its image: nothing over it
    elif mode == "mount":
        args += ["--mount", bind_mount(job.source_dir, CONTAINER_TARGET)]
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[SOURCE_ENV] = CONTAINER_TARGET  # the worker checks it measures this tree
    env |= translate_env(job)
    if job.gpus and gpu is not None:
        env |= gpu.inside_env()
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    return [*args, image, *job_script(job, command)]


def build_script(build: BuildJob) -> str:
    """The build container's script.  A fresh build: the copied tree (at the incoming
    folder) replaces the image's ``/workspace/target`` and the build commands run in
    it.  A reuse: each changed file is laid over the other role's built tree (a path
    missing from the copy was deleted by the change)."""
    target, incoming = CONTAINER_TARGET, CONTAINER_INCOMING
    lines = ["set -e", "cd /"]
    if build.reuse is None:
        lines += [f"rm -rf {target}", f"mv {incoming} {target}", f"cd {target}"]
        lines += [shlex.join(step) for step in build.commands]
    else:
        for rel in build.changed:
            src, dest = shlex.quote(f"{incoming}/{rel}"), shlex.quote(f"{target}/{rel}")
            lines.append(
                f'if [ -e {src} ]; then mkdir -p "$(dirname {dest})" && cp -p {src} {dest}; '
                f"else rm -f {dest}; fi"
            )
        lines.append(f"rm -rf {incoming}")
    return "\n".join(lines)


def build_create_args(
    build: BuildJob, image: str, *, name: str, campaign: str, caches: bool = True
) -> list[str]:
    """The exact ``docker create`` argv of a role's build container (pure): no GPU
    (GPU_ARCHS names the targets), no network, the campaign's ccache volume."""
    base = build.reuse.image if build.reuse is not None and build.reuse.image else image
    args = ["docker", "create", "--name", name, "--init", "--pull", "never"]
    args += ["--network", "none", "--workdir", "/"]
    args += ["--label", f"turbo-campaign.campaign={campaign}"]
    args += ["--label", f"turbo-campaign.build={build.role}"]
    args += ["--label", f"{PID_LABEL}={os.getpid()}"]
    # root (pip writes the image's tree) but without capabilities, like every job
    args += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    args += ["--pids-limit", str(DEFAULT_PIDS_LIMIT)]
    env: dict[str, str] = {}
    if caches:
        for volume, target in cache_volumes(campaign, build.role).items():
            args += ["--mount", f"type=volume,source={volume},target={target}"]
        env |= {"TRITON_CACHE_DIR": TRITON_CACHE, "CCACHE_DIR": CCACHE}
    env |= build.env
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    return [*args, base, "sh", "-c", build_script(build)]


def build_tag(campaign: str, round_n: int, role: str) -> str:
    """A per-round, per-role image name (lower case, unique)."""
    repo = f"{BUILD_REPO}/{safe_name(campaign).lower()}"
    return f"{repo}:r{round_n}-{safe_name(role).lower()}-{uuid.uuid4().hex[:8]}"


def docker_run_line(job: WorkerJob, create_args: Sequence[str], image: str) -> str:
    """An equivalent ``docker run`` command line for the record (``docker_run.txt``).

    The runner does create + cp + start + cp out; this is the one-command version: the
    same options and script, ``--rm`` instead of a name, the spec bind-mounted where
    the runner copies it.  A copied source tree (prepare commands) is noted: mount a
    throw-away copy of the worktree there to replay it.
    """
    args = list(create_args)
    at = len(args) - 4  # ... IMAGE sh -c SCRIPT
    if args[:2] != ["docker", "create"] or args[at] != image:
        raise ValueError(f"not a docker create argv for {image}: {args[:3]}...")
    options = args[2:at]
    if "--name" in options:
        i = options.index("--name")
        del options[i : i + 2]
    run = ["docker", "run", "--rm", *options, *args[at:]]
    lines = [f"# job {job.name}: equivalent of the runner's create/cp/start/cp for this job"]
    in_image = job.built is not None and job.built.image
    if not in_image and not any(a.endswith(f"target={CONTAINER_TARGET},readonly") for a in options):
        lines.append(
            f"# the source tree {job.source_dir} was copied to {CONTAINER_TARGET} (docker cp);"
            f" add --mount type=bind,source=<a copy of it>,target={CONTAINER_TARGET}"
        )
    lines.append(shlex.join(run))
    return "\n".join(lines) + "\n"
