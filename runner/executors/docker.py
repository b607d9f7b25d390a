"""Docker executor: one fresh container per worker job, through the docker CLI.

Every docker call goes through ``runner.cmd.run`` so the exact argv is logged and
testable; ``docker_create_args`` is a pure function.  Per job:

1. ``docker create`` (``--network none``, ``--pull never``, no ``--privileged``, only
   the leased GPU's device nodes, per-campaign named volumes for the Triton cache
   and ccache, the job's environment with host paths translated);
2. ``docker cp`` the spec in, and the source tree too when it must be writable;
3. ``docker start --attach``; the container's output goes to ``container.log``;
4. ``docker cp <ctr>:/out/. <out_dir>``; the container is removed in ``finally``
   unless ``keep`` (or ``CAMPAIGN_KEEP_CONTAINERS=1``).

Source tree: a pure-Python job (no ``prepare``) gets the worktree bind-mounted
read-only at ``/workspace/target``; a job with ``prepare`` (an editable rebuild writes
build outputs into the tree) gets a copy (``docker cp``), so the host tree is never
written.  ``source_mode="copy"`` forces the copy, e.g. for an image that holds a
prebuilt tree at ``/workspace/target`` (Dockerfile.rocm) that a mount would hide.

Security decisions: the container runs as the image's user (root in our images) with
Docker's default capabilities and seccomp profile.  ``--group-add video`` is not
needed for root; ``--security-opt seccomp=unconfined`` is not added: AMD lists it as
optional (it only allows the NUMA memory-policy syscalls for CPU/GPU affinity), HIP
compute runs without it, and the measurement must not widen the container's rights.
"""

from __future__ import annotations

import logging
import os
import re
import shlex
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

from runner import cmd
from runner.errors import CommandFailed, ConfigError, InfrastructureError
from runner.executors.base import JobOutcome, WorkerJob
from runner.executors.local import SOURCE_ENV

log = logging.getLogger("runner.executors.docker")

CONTAINER_TARGET = "/workspace/target"
CONTAINER_SPEC = "/workspace/spec.json"
CONTAINER_OUT = "/out"
TRITON_CACHE = "/cache/triton"
CCACHE = "/cache/ccache"
KEEP_ENV = "CAMPAIGN_KEEP_CONTAINERS"
DEFAULT_COMMAND: tuple[str, ...] = ("python3", "-m", "runner.worker", CONTAINER_SPEC, CONTAINER_OUT)
TIMEOUT_RETURNCODE = 124
LOG_NAME = "container.log"

SourceMode = Literal["auto", "mount", "copy"]
_UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_.-]+")


@dataclass(frozen=True)
class GpuRequest:
    """The GPU(s) leased to one job.

    AMD: ``render_nodes`` are the numbers N of ``/dev/dri/renderD<N>`` of the leased
    GPUs (ROCm sees only the GPUs whose render node the container can open, so inside
    the container they are numbered from 0).  NVIDIA: ``indices`` as in nvidia-smi.
    """

    vendor: Literal["amd", "nvidia"]
    indices: tuple[int, ...]
    render_nodes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.vendor not in ("amd", "nvidia"):
            raise ConfigError(f"GPU vendor {self.vendor!r}: use 'amd' or 'nvidia'")
        if not self.indices:
            raise ConfigError("a GPU request needs at least one GPU index")
        if self.vendor == "amd" and len(self.render_nodes) != len(self.indices):
            raise ConfigError(
                f"AMD GPUs {list(self.indices)} need one render node each (got "
                f"{list(self.render_nodes)}); read them from /sys/class/kfd/kfd/topology"
                "/nodes/*/properties (drm_render_minor) or `amd-smi list`"
            )

    def docker_args(self) -> list[str]:
        """Only the device nodes this lease needs."""
        if self.vendor == "nvidia":
            devices = ",".join(str(i) for i in self.indices)
            # --gpus splits on commas: several devices need the value quoted.
            value = f"device={devices}" if len(self.indices) == 1 else f'"device={devices}"'
            return ["--gpus", value]
        args = ["--device", "/dev/kfd"]
        for node in self.render_nodes:
            args += ["--device", f"/dev/dri/renderD{node}"]
        return args


def safe_name(text: str) -> str:
    """``text`` made valid for a docker container or volume name."""
    cleaned = _UNSAFE_NAME.sub("-", text).strip("-.")
    return cleaned or "job"


def container_name(job_name: str) -> str:
    return f"turbo-campaign-{safe_name(job_name)}-{uuid.uuid4().hex[:8]}"


def cache_volumes(campaign: str) -> dict[str, str]:
    """Named volume -> mount point; per campaign, shared by all its jobs."""
    prefix = f"turbo-campaign-{safe_name(campaign)}"
    return {f"{prefix}-triton": TRITON_CACHE, f"{prefix}-ccache": CCACHE}


def resolve_source_mode(job: WorkerJob, mode: SourceMode) -> Literal["mount", "copy"]:
    if mode == "auto":
        return "copy" if job.prepare else "mount"
    if mode == "mount" and job.prepare:
        raise ConfigError(
            f"job {job.name}: prepare commands write into the source tree, which a "
            "read-only mount forbids; use source_mode='copy' or 'auto'"
        )
    return mode


def translate_path(value: str, mapping: Mapping[str, str]) -> str:
    """Rewrite each ``os.pathsep``-separated entry that lies under a host path."""
    parts = []
    for part in value.split(os.pathsep):
        for host, inside in mapping.items():
            if part == host or part.startswith(host + "/"):
                part = inside + part[len(host) :]
                break
        parts.append(part)
    return os.pathsep.join(parts)


def translate_env(job: WorkerJob) -> dict[str, str]:
    """``job.env`` with host paths (source, spec, out) replaced by container paths."""
    mapping = {
        os.fspath(job.source_dir.resolve()): CONTAINER_TARGET,
        os.fspath(job.source_dir): CONTAINER_TARGET,
        os.fspath(job.spec_path): CONTAINER_SPEC,
        os.fspath(job.out_dir): CONTAINER_OUT,
    }
    return {key: translate_path(value, mapping) for key, value in job.env.items()}


def job_script(job: WorkerJob, command: Sequence[str]) -> list[str]:
    """``sh -c`` running the prepare commands, then exec-ing the worker command."""
    lines = ["set -e", f"mkdir -p {CONTAINER_OUT}"]
    lines += [shlex.join(step) for step in job.prepare]
    lines.append("exec " + shlex.join(command))
    return ["sh", "-c", "\n".join(lines)]


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
    if gpu is not None:
        args += gpu.docker_args()
    env: dict[str, str] = {}
    if caches:
        for volume, target in cache_volumes(campaign).items():
            args += ["--mount", f"type=volume,source={volume},target={target}"]
        env |= {"TRITON_CACHE_DIR": TRITON_CACHE, "CCACHE_DIR": CCACHE}
    if resolve_source_mode(job, source_mode) == "mount":
        args += ["--mount", _bind_mount(job.source_dir, CONTAINER_TARGET)]
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[SOURCE_ENV] = CONTAINER_TARGET  # the worker checks it measures this tree
    env |= translate_env(job)
    for key, value in env.items():
        args += ["-e", f"{key}={value}"]
    return [*args, image, *job_script(job, command)]


def _bind_mount(source: Path, target: str) -> str:
    path = os.fspath(source.resolve())
    if "," in path:
        raise ConfigError(f"source path {path!r} contains a comma; move the worktree")
    return f"type=bind,source={path},target={target},readonly"


def docker(args: Sequence[str], *, timeout: float | None = None) -> str:
    """Run ``docker <args>``; a failure becomes an InfrastructureError saying what to do."""
    try:
        return cmd.run(["docker", *args], timeout=timeout).stdout or ""
    except CommandFailed as exc:
        raise InfrastructureError(f"{exc}\n{_hint(exc.output)}") from exc


def _hint(output: str) -> str:
    if "Cannot connect to the Docker daemon" in output or "docker daemon" in output.lower():
        return (
            "The Docker daemon is not reachable: start it (`systemctl start docker`, or "
            "`dockerd >/tmp/dockerd.log 2>&1 &`; docker/ci-setup.sh does it) and check "
            "`docker info`."
        )
    if "No such image" in output or "pull access denied" in output:
        return (
            "The image is not built here: `make image-cpu` (CPU) or `make image` "
            "(ROCm); images are never pulled by the runner."
        )
    return "Check `docker info` and the output above."


def image_digest(image: str) -> str:
    """The local image id (``sha256:...``) of ``image``, for the round fingerprint."""
    return docker(["image", "inspect", "--format", "{{.Id}}", image]).strip()


def keep_requested(keep: bool) -> bool:
    return keep or os.environ.get(KEEP_ENV, "") not in ("", "0")


class _Container:
    """A created container that cannot leak: removed on a failed create and on exit
    (unless kept)."""

    def __init__(self, create_args: list[str], name: str, keep: bool) -> None:
        self.create_args = create_args
        self.name = name
        self.keep = keep

    def __enter__(self) -> _Container:
        try:
            docker(self.create_args[1:])
        except BaseException:
            self.remove()
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.keep:
            log.warning("kept container %s; remove it with: docker rm -f %s", self.name, self.name)
        else:
            self.remove()

    def remove(self) -> None:
        cmd.run(["docker", "rm", "--force", "--volumes", self.name], check=False)


class DockerExecutor:
    """Runs each worker job in a fresh container of ``image``."""

    name = "docker"

    def __init__(
        self,
        image: str,
        *,
        gpu: GpuRequest | None,
        campaign: str,
        keep: bool = False,
        caches: bool = True,
        command: Sequence[str] = DEFAULT_COMMAND,
        source_mode: SourceMode = "auto",
    ) -> None:
        self.image = image
        self.gpu = gpu
        self.campaign = campaign
        self.keep = keep_requested(keep)
        self.caches = caches
        self.command = tuple(command)
        self.source_mode: SourceMode = source_mode

    def create_args(self, job: WorkerJob, name: str) -> list[str]:
        return docker_create_args(
            job,
            self.image,
            self.gpu,
            name=name,
            campaign=self.campaign,
            caches=self.caches,
            command=self.command,
            source_mode=self.source_mode,
        )

    def run_job(self, job: WorkerJob) -> JobOutcome:
        name = container_name(job.name)
        job.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = job.out_dir / LOG_NAME
        with _Container(self.create_args(job, name), name, self.keep):
            self._copy_in(job, name)
            returncode = self._start(job, name)
            log_path.write_text(docker(["logs", name]), encoding="utf-8")
            self._copy_out(job, name, returncode, log_path)
        return JobOutcome(job.name, returncode, job.out_dir, log_path)

    def _copy_in(self, job: WorkerJob, name: str) -> None:
        docker(["cp", os.fspath(job.spec_path), f"{name}:{CONTAINER_SPEC}"])
        if resolve_source_mode(job, self.source_mode) == "copy":
            docker(["cp", f"{os.fspath(job.source_dir)}/.", f"{name}:{CONTAINER_TARGET}"])

    def _start(self, job: WorkerJob, name: str) -> int:
        """Run the container to completion; its exit status (124 after a timeout)."""
        try:
            proc = cmd.run(
                ["docker", "start", "--attach", name], check=False, timeout=job.timeout_s
            )
        except CommandFailed:  # only a timeout: check=False
            log.warning("job %s: timed out after %s s; killing %s", job.name, job.timeout_s, name)
            cmd.run(["docker", "kill", name], check=False)
            return TIMEOUT_RETURNCODE
        state = docker(["inspect", "--format", "{{.State.ExitCode}}", name]).strip()
        if not state.lstrip("-").isdigit():
            raise InfrastructureError(
                f"container {name} has no exit code ({state!r}); docker start said:\n"
                f"{(proc.stdout or '')[-2000:]}\nCheck `docker info` and the daemon log."
            )
        return int(state)

    def _copy_out(self, job: WorkerJob, name: str, returncode: int, log_path: Path) -> None:
        try:
            docker(["cp", f"{name}:{CONTAINER_OUT}/.", os.fspath(job.out_dir)])
        except InfrastructureError as exc:
            if returncode == 0:
                raise
            with log_path.open("a", encoding="utf-8") as fh:
                fh.write(f"\n[runner] no artifacts copied out of {name}: {exc}\n")
