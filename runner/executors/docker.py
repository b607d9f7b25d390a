"""Docker executor: one fresh container per worker job, through the docker CLI.

Every docker call goes through ``runner.core.processes.run`` so the exact argv is logged and
testable; ``docker_create_args`` is a pure function.  Per job:

1. ``docker create`` (``--network none``, ``--pull never``, no ``--privileged``, only
   the leased GPU's device nodes, per-campaign named volumes for the Triton cache
   and ccache, the job's environment with host paths translated, the confinement of
   ``containment_args``: the spec mounted read-only, the job's out folder mounted
   writable at ``/out``);
2. ``docker cp`` the source tree in when it must be writable;
3. a reaper (``runner.executors.reaper``) that removes the container if the campaign
   process dies (the ``docker start --attach`` client dies with it, the container
   would not), holding the GPU lease until the container is gone;
4. ``docker start --attach``; the container's output goes to ``container.log``; the
   container is removed in ``finally`` unless ``keep`` (or
   ``CAMPAIGN_KEEP_CONTAINERS=1``).

Source tree: a pure-Python job (no ``prepare``) gets the worktree bind-mounted
read-only at ``/workspace/target``; a job with ``prepare`` (an editable rebuild writes
build outputs into the tree) gets a copy (``docker cp``), so the host tree is never
written.  ``source_mode="copy"`` forces the copy, e.g. for an image that holds a
prebuilt tree at ``/workspace/target`` (Dockerfile.rocm) that a mount would hide.

Native targets (``prepare_role``): a role's build is made once per build key
(``runner.executors.build_cache``).  To compile, a build container of the campaign
image gets a writable copy of the role's tree, which replaces ``/workspace/target``
(the image's own built tree is removed first, so nothing stale survives), runs the
build (``pip install --no-build-isolation -e .``, GPU_ARCHS, ccache on the campaign's
named volume), lists the files it added with their checksums, and is committed as
the cache's image of that key (``turbo-campaign-cache:<cache folder id>-<key>``, kept
across rounds and the campaigns of one campaigns root).  A role whose key is cached
gets a container of that image that checks the checksums (a mismatch: the entry is
removed and the role compiled) and replaces the tree with the role's own, the build
products copied in; it is committed as a per-round image, which ``release_role``
removes at the end of the round.  Every job of the role then runs in a fresh container
of its image: nothing is mounted or copied over the built tree.

GPUs: each job names the host GPUs leased to it (``WorkerJob.gpus``); the container
gets only those (``GpuRequest.for_job``) and sees them numbered from 0, so the
visibility variables inside are set to 0..n-1.

Security decisions: no ``--privileged``, only the leased GPUs' device nodes, network
off; a candidate is untrusted code, so a measuring/test container (source mounted
read-only) runs as an unprivileged user with no capabilities, ``no-new-privileges``,
a read-only root filesystem with a private tmpfs at ``/tmp`` (HOME) for scratch, and
pids and memory limits: it can write only its out folder and the campaign's caches
(docs/reliability.md).  A job with ``prepare`` commands (a build into a copied tree)
keeps a writable root filesystem and root inside the container, still without
capabilities.  AMD jobs get AMD's documented run settings (``GpuRequest.amd``): the host's
numeric ``video``/``render`` group ids (``--group-add``), ``--ipc=host``,
``--security-opt seccomp=unconfined`` (NUMA memory-policy syscalls), ``--shm-size``
and ``--pids-limit``/``--memory`` limits.  CPU jobs keep Docker's defaults.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Literal

import runner
from runner.core import processes as cmd
from runner.core.errors import CommandFailed, InfrastructureError, MeasurementFailed
from runner.core.files import write_atomic, write_json_atomic
from runner.core.prepare_lock import device_key, lock_path
from runner.executors.base import BuildJob, BuiltRole, JobOutcome, LiveWorker, WorkerJob
from runner.executors.build_cache import EntryInfo
from runner.executors.container import (
    CONTAINER_TARGET,
    KFD_TOPOLOGY,
    GpuRequest,
    SourceMode,
    resolve_source_mode,
)
from runner.executors.container_worker import ContainerWorker
from runner.executors.docker_args import (
    CONTAINER_INCOMING,
    CORRUPT_EXIT,
    DEFAULT_COMMAND,
    SERVE_COMMAND,
    build_create_args,
    build_tag,
    cache_tag,
    cache_volumes,
    container_name,
    docker_create_args,
    docker_run_line,
)
from runner.executors.gpus import detect_vendor
from runner.store.fingerprint import image_digest
from runner.store.leases import held_fds, lease_dir

log = logging.getLogger("runner.executors.docker")

KEEP_ENV = "CAMPAIGN_KEEP_CONTAINERS"
TIMEOUT_RETURNCODE = 124
LOG_NAME = "container.log"
IMAGE_RECORD = "image.json"
RUN_RECORD = "docker_run.txt"


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


class _Reaper:
    """The watchdog of one container (``runner.executors.reaper``): removes it if this
    process dies before the job ends; holds the GPU lease descriptors until then."""

    def __init__(self, name: str, keep: bool) -> None:
        self.name = name
        self.keep = keep
        self.proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> _Reaper:
        how = "kill" if self.keep else "rm"
        argv = [sys.executable, "-m", "runner.executors.reaper", self.name, how]
        self.proc = cmd.spawn(argv, env=_reaper_env(), pass_fds=held_fds())
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            assert self.proc.stdin is not None
            self.proc.stdin.write("done\n")
            self.proc.stdin.close()
        self.proc.wait()


def _reaper_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(runner.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


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
        serve_command: Sequence[str] = SERVE_COMMAND,
        source_mode: SourceMode = "auto",
        vendor: Literal["amd", "nvidia"] | None = None,
        topology_root: str | Path = KFD_TOPOLOGY,
        group_file: str | Path = "/etc/group",
    ) -> None:
        self.image = image
        self.gpu = gpu
        self.campaign = campaign
        self.keep = keep_requested(keep)
        self.caches = caches
        self._caches_open: set[str] = set()  # roles whose cache volumes are writable
        self.command = tuple(command)
        self.serve_command = tuple(serve_command)
        self.source_mode: SourceMode = source_mode
        self.vendor = vendor
        self.topology_root = topology_root
        self.group_file = group_file

    def gpu_request(self, job: WorkerJob) -> GpuRequest | None:
        """A fixed request (``gpu=``) wins; otherwise the job's own leased GPUs."""
        if self.gpu is not None or not job.gpus:
            return self.gpu
        vendor = self.vendor or detect_vendor()
        return GpuRequest.for_job(
            job.gpus, vendor, topology_root=self.topology_root, group_file=self.group_file
        )

    def create_args(self, job: WorkerJob, name: str, *, serving: bool = False) -> list[str]:
        """The job's ``docker create`` argv; a serving worker on a GPU also gets its
        device's preparation lock (``docker_create_args``)."""
        gpu = self.gpu_request(job)
        lock = None
        if serving and gpu is not None:
            lock = lock_path(lease_dir(), device_key(job.gpus, job.env))
        return docker_create_args(
            job,
            self.image,
            gpu,
            name=name,
            campaign=self.campaign,
            caches=self.caches,
            command=self.serve_command if serving else self.command,
            source_mode=self.source_mode,
            interactive=serving,
            prepare_lock=lock,
        )

    def _made_ready(self, job: WorkerJob, name: str, *, serving: bool) -> list[str]:
        """The job's create argv, recorded; its folders opened to the container user (its
        out folder to every user where its tree is mounted) and its cache volumes made
        writable there."""
        job.out_dir.mkdir(parents=True, exist_ok=True)
        create_args = self.create_args(job, name, serving=serving)
        mounted = resolve_source_mode(job, self.source_mode) == "mount"
        if mounted and self.caches:
            self._open_caches(job.role)
        self._record(job, create_args)
        # the unprivileged container user reads the spec and writes the out folder
        # (bind mounts); both lie in the round's private 0700 temporary folder
        os.chmod(job.spec_path, 0o644)
        os.chmod(job.out_dir, 0o777 if mounted else 0o755)
        return create_args

    def start_worker(self, job: WorkerJob) -> LiveWorker:
        """A serving worker (``--serve``) in a fresh container of the job's image, made
        as ``run_job``'s is but with its stdin open: ``docker start --attach
        --interactive`` carries the worker protocol, its stderr goes to the job's log.
        The container and its reaper last until ``ContainerWorker.release``."""
        name = container_name(job.name)
        log_path = job.out_dir / LOG_NAME
        create_args = self._made_ready(job, name, serving=True)
        with contextlib.ExitStack() as stack:
            stack.callback(os.chmod, job.out_dir, 0o755)
            stack.enter_context(_Container(create_args, name, self.keep))
            stack.enter_context(_Reaper(name, self.keep))
            self._copy_in(job, name)
            proc = cmd.start(
                ["docker", "start", "--attach", "--interactive", name],
                stderr_path=log_path,
                pass_fds=held_fds(),
            )
            ends = stack.pop_all()
        return ContainerWorker(
            job.name, job.out_dir, log_path, proc, container=name, on_end=ends.close
        )

    def run_job(self, job: WorkerJob) -> JobOutcome:
        name = container_name(job.name)
        log_path = job.out_dir / LOG_NAME
        create_args = self._made_ready(job, name, serving=False)
        try:
            with _Container(create_args, name, self.keep), _Reaper(name, self.keep):
                self._copy_in(job, name)
                returncode = self._start(job, name)
                write_atomic(log_path, docker(["logs", name]))
        finally:
            os.chmod(job.out_dir, 0o755)
        return JobOutcome(job.name, returncode, job.out_dir, log_path)

    def _open_caches(self, role: str) -> None:
        """Make the role's cache volumes writable by the unprivileged worker user
        (once per executor and role; a volume created by an older runner is
        root-owned)."""
        if role in self._caches_open:
            return
        volumes = cache_volumes(self.campaign, role)
        args = ["run", "--rm", "--pull", "never", "--network", "none", "--user", "0"]
        args += ["--entrypoint", "chmod"]
        for volume, target in volumes.items():
            args += ["--mount", f"type=volume,source={volume},target={target}"]
        docker([*args, self.image, "1777", *volumes.values()])
        self._caches_open.add(role)

    def build_identity(self) -> str:
        return f"image {image_digest(self.image)}"

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """The role's tree laid over the cached build of its key (a per-round image),
        or compiled in a container of the campaign image and committed as the cache's
        image of that key (``runner.executors.build_cache``)."""
        build.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = build.out_dir / "build.log"
        t0 = time.perf_counter()
        entry, why = build.cache.lookup(build.key)
        if entry is not None and (not entry.image or not self._has_image(entry.image)):
            build.cache.remove(build.key)
            entry, why = None, "the cached build's image is gone"
        if entry is not None and entry.image:
            tag = build_tag(self.campaign, build.round, build.role)
            code = self._build_container(build, log_path, tag, cached=entry.image)
            if code == 0:
                return BuiltRole(
                    build.role,
                    build.source_dir,
                    "hit",
                    "",
                    log_path,
                    round(time.perf_counter() - t0, 3),
                    tag,
                    build.key,
                )
            build.cache.remove(build.key)
            why = f"the cached build was corrupted (its checksums differ: {log_path.name})"
        tag = cache_tag(build.key, build.cache.root)
        self._build_container(build, log_path, tag)
        size = int(docker(["image", "inspect", "--format", "{{.Size}}", tag]).strip() or 0)
        base = int(docker(["image", "inspect", "--format", "{{.Size}}", self.image]).strip() or 0)
        info: EntryInfo = {
            "executor": self.name,
            "image": tag,
            "campaign_image": self.image,
            "size_bytes": max(size - base, 0),
            "built_from": build.built_from,
        }
        build.cache.store(build.key, info, keep=build.keep)
        return BuiltRole(
            role=build.role,
            source_dir=build.source_dir,
            outcome="compile",
            reason=why,
            log_path=log_path,
            seconds=round(time.perf_counter() - t0, 3),
            image=tag,
            key=build.key,
            cached_image=True,
        )

    @staticmethod
    def _has_image(image: str) -> bool:
        return cmd.run(["docker", "image", "inspect", image], check=False).returncode == 0

    def _build_container(
        self, build: BuildJob, log_path: Path, tag: str, cached: str | None = None
    ) -> int:
        """Run one build container and commit it as ``tag``: 0, or (``cached``) the
        exit code that says the cached build is corrupted; MeasurementFailed otherwise."""
        name = container_name(f"build-r{build.round}-{build.role}")
        create_args = build_create_args(
            build,
            self.image,
            name=name,
            campaign=self.campaign,
            caches=self.caches,
            cached=cached,
        )
        with _Container(create_args, name, self.keep), _Reaper(name, self.keep):
            docker(["cp", f"{os.fspath(build.source_dir)}/.", f"{name}:{CONTAINER_INCOMING}"])
            proc = cmd.run(
                ["docker", "start", "--attach", name], check=False, timeout=build.timeout_s
            )
            output = docker(["logs", name])
            header = f"$ {shlex.join(create_args)}\n"
            with log_path.open("a", encoding="utf-8") as log:
                log.write(header + output)
            state = docker(["inspect", "--format", "{{.State.ExitCode}}", name]).strip()
            if cached and state == str(CORRUPT_EXIT):
                return CORRUPT_EXIT
            if state != "0":
                raise MeasurementFailed(
                    f"building the {build.role} tree failed in {cached or self.image} (exit "
                    f"{state}; docker start said: {(proc.stdout or '').strip()[-300:]})",
                    log_path,
                )
            changes = ["--change", f"WORKDIR {CONTAINER_TARGET}"]
            changes += ["--change", f"LABEL turbo-campaign.build-key={build.key}"]
            docker(["commit", *changes, name, tag])
        return 0

    def release_role(self, built: BuiltRole) -> None:
        """Remove the role's per-round image (a cached build's image stays)."""
        if built.image and not built.cached_image and not self.keep:
            cmd.run(["docker", "image", "rm", "--force", built.image], check=False)

    def _record(self, job: WorkerJob, create_args: list[str]) -> None:
        """``image.json`` (tag and local image id) and ``docker_run.txt`` in the job's out
        dir; they travel into the round's ``artifacts/.../passes/<job>/``."""
        image = job.built.image if job.built is not None and job.built.image else self.image
        info = {"image": image, "image_digest": image_digest(image)}
        if image != self.image:
            reason = job.built.reason if job.built else ""
            info |= {"campaign_image": self.image, "built_from": reason}
        write_json_atomic(job.out_dir / IMAGE_RECORD, info)
        line = docker_run_line(job, create_args, image)
        write_atomic(job.out_dir / RUN_RECORD, line)

    def _copy_in(self, job: WorkerJob, name: str) -> None:
        if job.built is not None and job.built.image:
            return  # the built tree is in the role's image
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
