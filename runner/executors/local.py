"""The local executor: each job in a fresh subprocess with a clean environment.

The environment is rebuilt from a short allow-list (PATH, HOME, locale, GPU
visibility, caches) plus the job's own variables, so nothing from the user's shell
(a stray backend selector, PYTHONPATH) leaks into a measurement.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TextIO

import runner
from runner.cmd import run, start
from runner.executors.base import JobOutcome, LiveWorker, WorkerJob

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
)
SOURCE_ENV = "TURBO_CAMPAIGN_SOURCE"


def clean_env(job: WorkerJob) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASS_THROUGH if k in os.environ}
    env.update(job.env)
    runner_root = str(Path(runner.__file__).resolve().parent.parent)
    paths = [p for p in (env.get("PYTHONPATH", ""), runner_root) if p]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env[SOURCE_ENV] = str(job.source_dir)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


class LocalExecutor:
    """Runs the worker with ``python`` (default: this interpreter)."""

    name = "local"

    def __init__(self, python: str | None = None) -> None:
        self.python = python or sys.executable

    def _prepare(self, job: WorkerJob, env: dict[str, str], log: TextIO) -> int:
        """The job's preparation commands; the first non-zero exit code, else 0."""
        for cmd in job.prepare:
            proc = run(list(cmd), cwd=job.source_dir, env=env, check=False, timeout=job.timeout_s)
            log.write(f"$ {' '.join(cmd)}\n{proc.stdout}\n")
            if proc.returncode != 0:
                return proc.returncode
        return 0

    def start_worker(self, job: WorkerJob) -> LiveWorker:
        """A serving worker in a fresh subprocess: stdin/stdout are its pipes to the
        host, stderr goes to ``job.log``."""
        job.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = job.out_dir / "job.log"
        env = clean_env(job)
        with log_path.open("w", encoding="utf-8") as log:
            code = self._prepare(job, env, log)
            worker = [self.python, "-m", "runner.worker", "--serve", str(job.spec_path)]
            log.write(f"$ {' '.join(worker)} {job.out_dir}\n")
        if code:
            return LiveWorker(job.name, job.out_dir, log_path, None, code)
        proc = start([*worker, str(job.out_dir)], cwd=job.source_dir, env=env, stderr_path=log_path)
        return LiveWorker(job.name, job.out_dir, log_path, proc)

    def run_job(self, job: WorkerJob) -> JobOutcome:
        job.out_dir.mkdir(parents=True, exist_ok=True)
        log_path = job.out_dir / "job.log"
        env = clean_env(job)
        with log_path.open("w", encoding="utf-8") as log:
            code = self._prepare(job, env, log)
            if code:
                return JobOutcome(job.name, code, job.out_dir, log_path)
            worker = [self.python, "-m", "runner.worker", str(job.spec_path), str(job.out_dir)]
            proc = run(worker, cwd=job.source_dir, env=env, check=False, timeout=job.timeout_s)
            log.write(f"$ {' '.join(worker)}\n{proc.stdout}\n")
        return JobOutcome(job.name, proc.returncode, job.out_dir, log_path)
