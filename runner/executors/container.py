"""What a job's container is, whichever executor starts it (docker directly, or a Slurm
task): the paths inside, the GPU devices and groups it gets, its confinement (no
capabilities, limits, read-only root, unprivileged user), the environment with host
paths translated, and the script it runs. Pure: nothing here calls docker."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runner.core.errors import ConfigError, InfrastructureError
from runner.core.pci_bus import KFD_TOPOLOGY, kfd_gpus
from runner.core.spec import VISIBILITY
from runner.executors.base import WorkerJob

CONTAINER_TARGET = "/workspace/target"
# where a Slurm image task mounts the source read-only before copying it to the target
# (prepare commands write into the tree)
CONTAINER_SRC = "/workspace/src"


CONTAINER_SPEC = "/workspace/spec.json"


CONTAINER_OUT = "/out"


SourceMode = Literal["auto", "mount", "copy"]


_UNSAFE_NAME = re.compile(r"[^a-zA-Z0-9_.-]+")


GPU_GROUPS = ("video", "render")


@dataclass(frozen=True)
class GpuRequest:
    """The GPU(s) leased to one job, and the container settings that go with them.

    AMD: ``render_nodes`` are the numbers N of ``/dev/dri/renderD<N>`` of the leased
    GPUs (ROCm sees only the GPUs whose render node the container can open, so inside
    the container they are numbered from 0); ``group_ids`` the host's numeric ``video``
    and ``render`` groups (a non-root user in the image needs them to open the nodes);
    ``shm_size``, ``memory`` and ``pids_limit`` the container's limits (None: docker's
    default).  ``GpuRequest.amd`` reads all of it from the host.  NVIDIA: ``indices``
    as in nvidia-smi.  The wall-time limit is the job's ``timeout_s`` (``docker kill``).
    """

    vendor: Literal["amd", "nvidia"]
    indices: tuple[int, ...]
    render_nodes: tuple[int, ...] = ()
    group_ids: tuple[int, ...] = ()
    shm_size: str | None = None
    memory: str | None = None
    pids_limit: int | None = None

    def __post_init__(self) -> None:
        if self.vendor not in ("amd", "nvidia"):
            raise ConfigError(f"GPU vendor {self.vendor!r}: use 'amd' or 'nvidia'")
        if not self.indices:
            raise ConfigError("a GPU request needs at least one GPU index")
        if self.vendor == "amd" and len(self.render_nodes) != len(self.indices):
            raise ConfigError(
                f"AMD GPUs {list(self.indices)} need one render node each (got "
                f"{list(self.render_nodes)}); read them from {KFD_TOPOLOGY}"
                "/*/properties (drm_render_minor) or `amd-smi list`"
            )

    @classmethod
    def amd(
        cls,
        indices: Sequence[int],
        *,
        topology_root: str | Path = KFD_TOPOLOGY,
        group_file: str | Path = "/etc/group",
        shm_size: str | None = "16g",
        memory: str | None = None,
        pids_limit: int | None = 4096,
    ) -> GpuRequest:
        """An AMD request from the host: render nodes from the KFD topology, the
        ``video``/``render`` group ids from ``group_file``."""
        nodes = render_nodes_for(indices, topology_root)
        return cls(
            "amd",
            tuple(indices),
            tuple(int(n.removeprefix("/dev/dri/renderD")) for n in nodes),
            tuple(host_group_ids(GPU_GROUPS, group_file)),
            shm_size,
            memory,
            pids_limit,
        )

    @classmethod
    def for_job(
        cls,
        gpus: Sequence[int],
        vendor: Literal["amd", "nvidia"],
        *,
        topology_root: str | Path = KFD_TOPOLOGY,
        group_file: str | Path = "/etc/group",
    ) -> GpuRequest:
        """The request for the host GPUs leased to one job."""
        if vendor == "amd":
            return cls.amd(gpus, topology_root=topology_root, group_file=group_file)
        return cls("nvidia", tuple(gpus))

    def inside_env(self) -> dict[str, str]:
        """Visibility inside the container: it sees only the leased GPUs, numbered from
        0, so every selector names 0..n-1 (the host numbers would hide them)."""
        inside = ",".join(str(i) for i in range(len(self.indices)))
        if self.vendor == "nvidia":
            return {"CUDA_VISIBLE_DEVICES": inside}
        return {key: inside for key in VISIBILITY}

    def docker_args(self) -> list[str]:
        """Only the device nodes this lease needs, plus the AMD container settings."""
        if self.vendor == "nvidia":
            devices = ",".join(str(i) for i in self.indices)
            # --gpus splits on commas: several devices need the value quoted.
            value = f"device={devices}" if len(self.indices) == 1 else f'"device={devices}"'
            return ["--gpus", value, *self._limits()]
        args = ["--device", "/dev/kfd"]
        for node in self.render_nodes:
            args += ["--device", f"/dev/dri/renderD{node}"]
        for gid in self.group_ids:
            args += ["--group-add", str(gid)]
        # AMD's documented run settings: RCCL/HIP IPC needs the host IPC namespace; the
        # NUMA memory-policy syscalls (CPU/GPU affinity) need seccomp unconfined.
        args += ["--ipc=host", "--security-opt", "seccomp=unconfined"]
        return [*args, *self._limits()]

    def _limits(self) -> list[str]:
        args = []
        if self.shm_size:
            args += ["--shm-size", self.shm_size]
        if self.memory:
            args += ["--memory", self.memory]
        if self.pids_limit is not None:
            args += ["--pids-limit", str(self.pids_limit)]
        return args


def render_nodes_for(
    gpu_indices: Sequence[int], topology_root: str | Path = KFD_TOPOLOGY
) -> list[str]:
    """``/dev/dri/renderD<minor>`` of each GPU index, from the KFD topology.

    Each ``<topology_root>/<node>/`` holds ``gpu_id`` (0 for a CPU node) and
    ``properties`` (``key value`` lines, among them ``drm_render_minor``; a ``gpu_id``
    line there is read when the file is missing).  GPU index i is the i-th node (in
    node-number order) with a non-zero ``gpu_id``, the order ROCm enumerates them.
    The same node gives the card's PCI bus id (``runner.core.pci_bus``), by which the
    worker finds its amd-smi entry: one card from lease to ``--device`` to amd-smi.
    """
    root = Path(topology_root)
    if not root.is_dir():
        raise InfrastructureError(
            f"no KFD topology at {root}: is the amdgpu driver loaded (ls /dev/kfd)?"
        )
    gpus = kfd_gpus(root)
    wanted = []
    for i in gpu_indices:
        if not 0 <= i < len(gpus):
            raise ConfigError(f"GPU {i}: the KFD topology at {root} lists {len(gpus)} GPUs")
        minor = gpus[i].render_minor
        if minor is None:
            raise InfrastructureError(f"GPU {i} has no drm_render_minor in {root}")
        wanted.append(f"/dev/dri/renderD{minor}")
    return wanted


def host_group_ids(names: Sequence[str], group_file: str | Path = "/etc/group") -> list[int]:
    """Numeric ids of the groups ``names`` on the host (missing groups are skipped: the
    container gets the host's numbers, which its own /etc/group may not know)."""
    ids: dict[str, int] = {}
    for line in Path(group_file).read_text(encoding="utf-8").splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            ids.setdefault(fields[0], int(fields[2]))
    return [ids[n] for n in names if n in ids]


def safe_name(text: str, limit: int | None = None) -> str:
    """``text`` made valid for a docker container or volume name (and a Slurm job or
    file name): runs of other characters become ``-``; ``limit`` caps the length."""
    cleaned = _UNSAFE_NAME.sub("-", text).strip("-.")[:limit]
    return cleaned or "job"


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


CONTAINER_SCRATCH = "/tmp"


NOBODY = "65534:65534"


DEFAULT_PIDS_LIMIT = 4096


DEFAULT_MEMORY = "64g"


SCRATCH_SIZE = "4g"


def worker_user() -> str:
    """The container user of a measuring job: the host user (so the files it writes in
    the out folder are the host user's), or ``nobody`` when the host user is root."""
    uid, gid = os.getuid(), os.getgid()
    return NOBODY if uid == 0 else f"{uid}:{gid}"


def containment_args(
    job: WorkerJob, gpu: GpuRequest | None, mode: Literal["mount", "copy"]
) -> tuple[list[str], dict[str, str]]:
    """The confinement of one job's container (argv options, environment).

    Every job: no capabilities, ``no-new-privileges``, pids and memory limits (unless
    the GPU request sets its own), the spec mounted read-only and the out folder the
    only writable host path.  A measuring/test job (``mode == "mount"``: the source is
    a read-only mount) also runs as an unprivileged user on a read-only root
    filesystem, with a private tmpfs at ``/tmp`` (HOME) for scratch.  ROCm keeps what
    it needs from ``GpuRequest.docker_args`` (device nodes, video/render groups)."""
    args = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    gpu_args = gpu.docker_args() if gpu is not None else []
    if "--pids-limit" not in gpu_args:
        args += ["--pids-limit", str(DEFAULT_PIDS_LIMIT)]
    if "--memory" not in gpu_args:
        args += ["--memory", DEFAULT_MEMORY]
    args += ["--mount", bind_mount(job.spec_path, CONTAINER_SPEC)]
    args += ["--mount", bind_mount(job.out_dir, CONTAINER_OUT, readonly=False)]
    env: dict[str, str] = {}
    if mode == "mount":
        args += ["--user", worker_user(), "--read-only"]
        args += ["--tmpfs", f"{CONTAINER_SCRATCH}:rw,nosuid,nodev,exec,size={SCRATCH_SIZE}"]
        env["HOME"] = CONTAINER_SCRATCH
    return args, env


def bind_mount(source: Path, target: str, *, readonly: bool = True) -> str:
    path = os.fspath(source.resolve())
    if "," in path:
        raise ConfigError(f"path {path!r} contains a comma; move it (it is bind-mounted)")
    return f"type=bind,source={path},target={target}" + (",readonly" if readonly else "")
