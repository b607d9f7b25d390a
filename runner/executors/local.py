"""The local executor: each job in a fresh subprocess with a clean environment.

The environment is rebuilt from a short allow-list (PATH, HOME, locale, GPU
visibility, caches) plus the job's own variables, so nothing from the user's shell
(a stray backend selector, PYTHONPATH) leaks into a measurement.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import runner
from runner.core.cgroup import NO_CGROUP, WorkerCgroup
from runner.core.errors import MeasurementFailed
from runner.core.pause_points import ENV_NAMES as PAUSE_ENV_NAMES
from runner.core.prepare_lock import PREPARE_LOCK_ENV, device_key, lock_path
from runner.core.processes import run, start
from runner.core.spec import SOURCE_ENV
from runner.core.startup import SYSPATH_ENV, isolated_python, syspath
from runner.executors.base import (
    BuildJob,
    BuiltRole,
    JobOutcome,
    LiveWorker,
    WorkerJob,
)
from runner.executors.build_cache import PRODUCTS, Entry, EntryInfo, tree_files
from runner.executors.isolation import protect
from runner.executors.jit_cache import jit_env
from runner.store.leases import held_fds, lease_dir

_PASS_THROUGH = (
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "TMPDIR",
    "USER",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "TRITON_CACHE_DIR",
    "CCACHE_DIR",
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OMP_NUM_THREADS",
    "LD_LIBRARY_PATH",
    "ROCM_PATH",
    "HIP_PATH",
    "CUDA_HOME",
    *PAUSE_ENV_NAMES,  # the documented debug hook (runner.core.pause_points)
)


def clean_env(job: WorkerJob) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
    if job.jit_cache is not None:  # the role's own, not the user's shared one
        env.update(jit_env(job.jit_cache))
    env.update(job.env)
    runner_root = str(Path(runner.__file__).resolve().parent.parent)
    own = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (own, runner_root) if p)  # its children
    # The worker itself starts isolated (runner.core.startup): the harness first on its
    # path, then the standard library, then the job's own paths and its tree.
    env[SYSPATH_ENV] = syspath(runner_root, [*own.split(os.pathsep), job.source_dir])
    env[SOURCE_ENV] = str(job.source_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def prepare_lock_env(job: WorkerJob, env: Mapping[str, str]) -> dict[str, str]:
    """The serving worker's preparation lock (``runner.core.prepare_lock``): one file
    per physical device, beside the GPU leases of this host, so every worker that
    prepares on that device, of this round or any other, prepares alone there.  The
    worker takes it only on a GPU."""
    path = lock_path(lease_dir(), device_key(job.gpus, env))
    return {PREPARE_LOCK_ENV: str(path)}


def lay_products(entry: Entry, tree: Path) -> list[str]:
    """Copy a cached build's products into ``tree`` (a file ``tree`` already has is its
    own and stays).  Returns the copied paths."""
    copied = []
    for rel in entry.products():
        dest = tree / rel
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(entry.path / PRODUCTS / rel, dest)
        copied.append(rel)
    return copied


def toolchain(python: str) -> str:
    """The local build environment's identity: the Python (version, executable), its
    torch version, and the ``--version`` output of the C compiler it builds extensions
    with (sysconfig's CC, as the build sees it: CC is not passed through), of nvcc and
    of hipcc."""
    probe = (
        "import sys, sysconfig, importlib.metadata as m\n"
        "print(sys.version.split()[0], sys.executable)\n"
        "try:\n    print('torch', m.version('torch'))\n"
        "except m.PackageNotFoundError:\n    print('no torch')\n"
        "print((sysconfig.get_config_var('CC') or 'cc').split()[0])"
    )
    *lines, cc = (run([python, "-c", probe], check=False).stdout or "").strip().splitlines()
    for tool in (cc, "nvcc", "hipcc"):
        if shutil.which(tool):
            lines.append(f"{tool}: {run([tool, '--version'], check=False).stdout or ''}")
    return "\n".join(lines)


def with_interpreter(command: Sequence[str], python: str) -> list[str]:
    """A build command with ``python``/``pip`` (and their ``3`` names) meaning
    ``python`` (this executor's interpreter, or an image's ``python3``)."""
    if command and command[0] in ("python", "python3"):
        return [python, *command[1:]]
    if command and command[0] in ("pip", "pip3"):
        return [python, "-m", "pip", *command[1:]]
    return list(command)


Compile = Callable[[BuildJob, TextIO, Path], None]


def build_in_place(build: BuildJob, compile_tree: Compile, executor: str) -> BuiltRole:
    """The cached build of the key laid into the role's own tree (it stays the imported
    tree), or ``compile_tree(build, log, log_path)`` building the tree in place (on this
    host, or in an image on a Slurm node) and its products stored under the key."""
    build.out_dir.mkdir(parents=True, exist_ok=True)
    log_path = build.out_dir / "build.log"
    t0 = time.perf_counter()
    with log_path.open("w", encoding="utf-8") as log:
        outcome = "compile"
        entry, why = build.cache.lookup(build.key)
        if entry is not None:
            copied = lay_products(entry, build.source_dir)
            log.write(f"build cache hit {build.key}: copied {copied}\n")
            outcome = "hit"
        else:
            log.write(f"build key {build.key}: {why}; compiling\n")
            log.flush()
            before = set(tree_files(build.source_dir))
            compile_tree(build, log, log_path)
            products = [p for p in tree_files(build.source_dir) if p not in before]
            info: EntryInfo = {"executor": executor, "built_from": build.built_from}
            build.cache.store(
                build.key, info, tree=build.source_dir, products=products, keep=build.keep
            )
            log.write(f"stored {len(products)} build products under {build.key}\n")
    return BuiltRole(
        role=build.role,
        source_dir=build.source_dir,
        outcome=outcome,
        reason="" if entry is not None else why,
        log_path=log_path,
        seconds=round(time.perf_counter() - t0, 3),
        key=build.key,
    )


def _isolated(job: WorkerJob, argv: Sequence[str]) -> list[str]:
    """``argv`` with the job's read-only paths protected (its artifacts folder and its
    role's JIT cache folder stay writable): ``runner.executors.isolation``."""
    writable = [job.out_dir]
    if job.jit_cache is not None:
        job.jit_cache.mkdir(parents=True, exist_ok=True)
        writable.append(job.jit_cache)
    return protect(argv, job.readonly, writable, job.hidden)


def _run_isolated(
    job: WorkerJob, argv: Sequence[str], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    """``argv`` run to its end in the job's tree, isolated (``_isolated``), within the
    job's time limit, dying with the campaign and holding the GPU lease descriptors."""
    return run(
        _isolated(job, argv),
        cwd=job.source_dir,
        env=env,
        check=False,
        timeout=job.timeout_s,
        die_with_parent=True,
        pass_fds=held_fds(),
    )


@dataclass
class _Prepared:
    """A job made ready by ``LocalExecutor._prepared``: where its log is, the log open,
    the environment its worker runs in and its preparation's exit code (0: all ran)."""

    log_path: Path
    env: dict[str, str]
    log: TextIO
    code: int


class LocalExecutor:
    """Runs the worker with ``python`` (default: this interpreter).  Each worker (and
    each prepare command) runs in its own process group with the parent-death signal
    and holds the GPU lease descriptors, so it dies with the campaign and the GPUs stay
    leased until it has exited (``runner.core.processes.run(die_with_parent=True)``)."""

    name = "local"

    def __init__(self, python: str | None = None, cgroups: bool = True) -> None:
        self.python = python or sys.executable
        # each serving worker in a cgroup of its own where one can be made
        # (runner.core.cgroup); False only to measure what the cgroup costs
        # (benchmarks/cgroup_gpu.py)
        self.cgroups = cgroups

    def argv(self, command: tuple[str, ...]) -> list[str]:
        """``python``/``pip`` in a build command mean this executor's interpreter."""
        return with_interpreter(command, self.python)

    def build_identity(self) -> str:
        return toolchain(self.python)

    def prepare_role(self, build: BuildJob) -> BuiltRole:
        """The role's tree built in place here (``build_in_place``)."""
        return build_in_place(build, self._compile, self.name)

    def _compile(self, build: BuildJob, log: TextIO, log_path: Path) -> None:
        """The build commands in the role's tree, the other roles' trees read-only
        (``build.readonly``: a candidate's setup.py cannot rewrite the incumbent's
        build)."""
        env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
        env |= build.env
        for command in build.commands:
            argv = self.argv(command)
            guarded = protect(argv, build.readonly, [], build.hidden)
            proc = run(guarded, cwd=build.source_dir, env=env, check=False, timeout=build.timeout_s)
            log.write(f"$ {' '.join(argv)}\n{proc.stdout}\n")
            if proc.returncode != 0:
                raise MeasurementFailed(
                    f"building the {build.role} tree failed (exit {proc.returncode}): "
                    f"{' '.join(argv)}",
                    log_path,
                )

    def release_role(self, built: BuiltRole) -> None:
        """Nothing to free: the build lives in the role's worktree."""

    def _prepare(self, job: WorkerJob, env: dict[str, str], log: TextIO) -> int:
        """The job's preparation commands; the first non-zero exit code, else 0."""
        for cmd in job.prepare:
            proc = _run_isolated(job, cmd, env)
            log.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n")
            if proc.returncode != 0:
                return proc.returncode
        return 0

    @contextmanager
    def _prepared(self, job: WorkerJob) -> Iterator[_Prepared]:
        """The job made ready to start its worker, the same for a pass and a serving
        worker: its artifacts folder, its clean environment, ``job.log`` open for
        writing and its preparation commands run (their exit code in ``code``)."""
        job.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = job.out_dir / "job.log"
        env = clean_env(job)
        with log_path.open("w", encoding="utf-8") as log:
            code = self._prepare(job, env, log)
            yield _Prepared(log_path, env, log, code)

    def start_worker(self, job: WorkerJob) -> LiveWorker:
        """A serving worker in a fresh subprocess: stdin/stdout are its pipes to the
        host, stderr goes to ``job.log``."""
        with self._prepared(job) as ready:
            args = ["--serve", str(job.spec_path), str(job.out_dir)]
            worker = isolated_python(self.python, "runner.worker", args)
            ready.log.write(f"$ {self.python} -m runner.worker {' '.join(args)} (isolated)\n")
        if ready.code:
            return LiveWorker(job.name, job.out_dir, ready.log_path, None, ready.code)
        # all it starts is counted there, on the CPU and on a GPU alike (its cost on a
        # GPU's turns: docs/benchmarks.md, "The cgroup CPU guard on one H100")
        group = WorkerCgroup.create(job.name) if self.cgroups else None
        proc = start(
            _isolated(job, worker),
            cwd=job.source_dir,
            env={**ready.env, **prepare_lock_env(job, ready.env)},
            stderr_path=ready.log_path,
            pass_fds=held_fds(),
            cgroup_procs=group.procs if group is not None else None,
        )
        off = NO_CGROUP if self.cgroups else "cgroups off for this executor"
        if group is not None and proc.pid not in group.members():  # it could not join
            group.remove()
            group, off = None, "the worker could not join its cgroup"
        return LiveWorker(
            job.name,
            job.out_dir,
            ready.log_path,
            proc,
            stoppable=True,
            cgroup=group,
            guard_off=off,
        )

    def run_job(self, job: WorkerJob) -> JobOutcome:
        with self._prepared(job) as ready:
            if ready.code:
                return JobOutcome(job.name, ready.code, job.out_dir, ready.log_path)
            args = [str(job.spec_path), str(job.out_dir)]
            worker = isolated_python(self.python, "runner.worker", args)
            proc = _run_isolated(job, worker, ready.env)
            shown = " ".join([self.python, "-m", "runner.worker", *args])
            ready.log.write(f"$ {shown} (isolated: runner.core.startup)\n{proc.stdout}\n")
        return JobOutcome(job.name, proc.returncode, job.out_dir, ready.log_path)
