"""The exact docker argv the docker executor sends (pure): a job's ``docker create``, a
role build's container and its script, the per-round image tag, and the one-command
``docker run`` kept for the record."""

from __future__ import annotations

import hashlib
import os
import shlex
import uuid
from collections.abc import Sequence
from pathlib import Path

from runner.core.prepare_lock import PREPARE_LOCK_ENV
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
from runner.executors.jit_cache import AUTOTUNE_ENV

CONTAINER_INCOMING = "/workspace/incoming"


BUILD_REPO = "turbo-campaign-build"


CACHE_REPO = "turbo-campaign-cache"


TRITON_CACHE = "/cache/triton"


CCACHE = "/cache/ccache"


DEFAULT_COMMAND: tuple[str, ...] = ("python3", "-m", "runner.worker", CONTAINER_SPEC, CONTAINER_OUT)
# where a serving worker on a GPU finds its device's preparation lock
CONTAINER_PREPARE_LOCK = "/workspace/prepare.lock"
# a serving worker's (``DockerExecutor.start_worker``): it answers the host over stdin/stdout
SERVE_COMMAND: tuple[str, ...] = (
    "python3",
    "-m",
    "runner.worker",
    "--serve",
    CONTAINER_SPEC,
    CONTAINER_OUT,
)


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
    interactive: bool = False,
    prepare_lock: Path | None = None,
) -> list[str]:
    """The exact ``docker create`` argv for one job (pure); ``interactive``: its stdin
    kept open (a serving worker's requests come that way); ``prepare_lock``: the host's
    preparation lock of the job's device (``runner.core.prepare_lock``), mounted
    read-only and named to the worker (a flock needs no write access), so workers in
    containers autotune one at a time on a device as local ones do."""
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
        env |= {"TRITON_CACHE_DIR": TRITON_CACHE, "CCACHE_DIR": CCACHE, **AUTOTUNE_ENV}
    if job.built is not None and job.built.image:
        image = job.built.image  # the role's built tree is in its image: nothing over it
    elif mode == "mount":
        args += ["--mount", bind_mount(job.source_dir, CONTAINER_TARGET)]
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    if prepare_lock is not None:
        args += ["--mount", bind_mount(prepare_lock, CONTAINER_PREPARE_LOCK)]
        env[PREPARE_LOCK_ENV] = CONTAINER_PREPARE_LOCK
    env[SOURCE_ENV] = CONTAINER_TARGET  # the worker checks it measures this tree
    env |= translate_env(job)
    if job.gpus and gpu is not None:
        env |= gpu.inside_env()
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    if interactive:
        args.append("--interactive")
    return [*args, image, *job_script(job, command)]


BUILD_META = "/workspace/.turbo-build"


CORRUPT_EXIT = 86


_LIST = (
    "find . -path ./.git -prune -o -name __pycache__ -prune -o \\( -type f -o -type l \\) "
    "-print | LC_ALL=C sort"
)


def build_script(build: BuildJob) -> str:
    """The compiling container's script: the copied tree (at the incoming folder)
    replaces the image's ``/workspace/target``, the build commands run in it, and the
    files they added (the build products) are listed with their checksums in
    ``BUILD_META``, its completion marker (the checksums of both lists) last."""
    target, incoming, meta = CONTAINER_TARGET, CONTAINER_INCOMING, BUILD_META
    lines = ["set -e", "cd /", f"rm -rf {target} {meta}", f"mv {incoming} {target}"]
    lines += [f"cd {target}", f"{_LIST} > /tmp/turbo-before"]
    lines += [shlex.join(step) for step in build.commands]
    lines += [
        f"mkdir -p {meta}",
        f"{_LIST} > /tmp/turbo-after",
        f"LC_ALL=C comm -13 /tmp/turbo-before /tmp/turbo-after > {meta}/products",
        f"tr '\\n' '\\0' < {meta}/products | xargs -0 -r sha256sum > {meta}/products.sha256",
        f"sha256sum {meta}/products {meta}/products.sha256 > {meta}/complete",
    ]
    return "\n".join(lines)


def cached_build_script() -> str:
    """The script of a container of a cached build's image: check the build's
    checksums (exit ``CORRUPT_EXIT`` when anything differs), then the role's own tree
    (at the incoming folder) with the build products copied into it replaces
    ``/workspace/target``."""
    target, incoming, meta = CONTAINER_TARGET, CONTAINER_INCOMING, BUILD_META
    return "\n".join(
        [
            "set -e",
            f"sha256sum -c --quiet {meta}/complete || exit {CORRUPT_EXIT}",
            f"cd {target}",
            f"sha256sum -c --quiet {meta}/products.sha256 || exit {CORRUPT_EXIT}",
            'while IFS= read -r rel; do dest="' + incoming + '/$rel"; '
            'if [ ! -e "$dest" ]; then mkdir -p "$(dirname "$dest")" && cp -a "$rel" "$dest"; '
            f"fi; done < {meta}/products",
            "cd /",
            f"rm -rf {target}",
            f"mv {incoming} {target}",
        ]
    )


def build_create_args(
    build: BuildJob,
    image: str,
    *,
    name: str,
    campaign: str,
    caches: bool = True,
    cached: str | None = None,
) -> list[str]:
    """The exact ``docker create`` argv of a role's build container (pure): no GPU
    (GPU_ARCHS names the targets), no network, the campaign's ccache volume.  With
    ``cached`` (a cached build's image) the container lays the role's tree over it
    instead of compiling (``cached_build_script``)."""
    base = cached or image
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
    script = cached_build_script() if cached else build_script(build)
    return [*args, base, "sh", "-c", script]


def build_tag(campaign: str, round_n: int, role: str) -> str:
    """A per-round, per-role image name (lower case, unique)."""
    repo = f"{BUILD_REPO}/{safe_name(campaign).lower()}"
    return f"{repo}:r{round_n}-{safe_name(role).lower()}-{uuid.uuid4().hex[:8]}"


def cache_tag(key: str, cache_root: Path) -> str:
    """The image of a cached build: named by its build cache's folder and its build key,
    so the campaigns of one campaigns root share it and two roots on one Docker daemon
    never name (nor evict: ``BuildCache._remove``) each other's image."""
    root = hashlib.sha256(str(Path(cache_root).resolve()).encode()).hexdigest()[:12]
    return f"{CACHE_REPO}:{root}-{key}"


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
