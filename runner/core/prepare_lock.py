"""One serving worker at a time makes a shape's first calls on a device.

A shape's first calls compile and autotune its kernels: Triton's ``triton.autotune``
times every config (64-96 per kernel) and keeps the fastest.  Workers of a paired round
start together, so without this each process autotuned while the others did too, on
the same GPU, and picked its config on contaminated timings: on an H100 the four
workers of one BASELINE measured the same backward at 100.2-108.0 TFLOPS in some and
118.6-131.1 in others (docs/measurement.md).  So the host names one lock file per
physical device (``PREPARE_LOCK_ENV``, ``lock_path``), and a serving worker on a GPU
holds an exclusive ``fcntl.flock`` on it while it prepares a shape (``alone_on_device``).

The kernel drops a flock when the last descriptor of its open file closes, so a worker
killed while it holds the lock (SIGKILL, a crash) frees it at once and the others go
on; the descriptor is opened close-on-exec, so no child of the worker keeps it after.
The files are never deleted (a waiter and a new holder would lock two inodes).

Worker-side and host-side: no torch, no pydantic.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

# The lock file of the device a serving worker prepares on (set by the executor; a
# worker without it, or on the CPU, takes no lock).
PREPARE_LOCK_ENV = "TURBO_CAMPAIGN_PREPARE_LOCK"
# The physical-device selectors in the order that names the physical device first: on
# AMD ``ROCR_VISIBLE_DEVICES`` picks it and HIP's filters renumber it 0
# (``runner.executors.gpus.gpu_env``).
_SELECTORS = ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def device_key(gpus: Sequence[int], env: Mapping[str, str]) -> str:
    """The physical device a job's worker measures on, as a file-name part: the first
    GPU leased to the job, else the first device its visibility variable shows (an index
    or a UUID), else ``0`` (what a worker that sees every device uses)."""
    if gpus:
        return str(gpus[0])
    for name in _SELECTORS:
        first = env.get(name, "").split(",")[0].strip()
        if first:
            return re.sub(r"[^A-Za-z0-9_.-]", "_", first)
    return "0"


def lock_path(root: Path, key: str) -> Path:
    """The preparation lock of device ``key`` under ``root``, made (with its folder)
    open to every user of the host like the GPU leases beside it, so a worker that may
    not write there can still lock it (a flock needs no write access)."""
    folder = root / "prepare"
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):
            folder.chmod(0o1777)
    path = folder / f"gpu-{key}.lock"
    os.close(_open(path))
    return path


def _open(path: str | Path) -> int:
    """``path`` opened (made when missing, for every user), or read-only where this
    process may not write it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
            raise
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)  # another user's worker must be able to take it later
    return fd


@contextlib.contextmanager
def alone_on_device(path: str | None) -> Iterator[float]:
    """Hold the exclusive lock ``path`` (blocking until the holder before is done);
    yields the seconds waited for it.  ``path`` None or empty: no lock, 0.0."""
    if not path:
        yield 0.0
        return
    fd = _open(path)
    try:
        start = time.monotonic()
        fcntl.flock(fd, fcntl.LOCK_EX)  # dropped by the kernel if this process dies
        yield time.monotonic() - start
    finally:
        os.close(fd)  # closing the only descriptor releases the lock
