"""No serving worker autotunes while another runs kernels on the same device.

A shape's first calls compile and autotune its kernels: Triton's ``triton.autotune``
times every config (64-96 per kernel) and keeps the fastest.  Workers of a paired round
start together, so without this each process autotuned while the others did too, on
the same GPU, and picked its config on contaminated timings: on an H100 the four
workers of one BASELINE measured the same backward at 100.2-108.0 TFLOPS in some and
118.6-131.1 in others (docs/measurement.md).  So the host names one lock file per
physical device (``PREPARE_LOCK_ENV``, ``lock_path``), and a serving worker on a GPU
holds an ``fcntl.flock`` on it while it prepares a shape (``DeviceLock``): shared, so
the workers' imports, checks, compiles and first calls, which time nothing, run side
by side, and exclusive while it times configs to choose one (Triton's autotuner,
hooked by ``runner.worker.bench.autotune_alone``), which waits until no other worker
is inside a shared hold and keeps every other one out until it is done.  A worker that
cannot hook its autotuner prepares each shape under the exclusive hold, as all did
before (each one's first shape, 3.1-3.6 s of process start-up on an H100 at 38024bf,
then paid one worker after another: docs/benchmarks.md).

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
# The same lock file, for a test command the host runs beside the workers' start-up (its
# ``python`` holds it itself: ``runner.worker.bench.autotune_alone.join_as_command``).
COMMAND_LOCK_ENV = "TURBO_CAMPAIGN_COMMAND_LOCK"
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


class DeviceLock:
    """One worker's hold on its device's lock file, through one descriptor (what the
    kernel drops when the process dies).  ``shared``: other workers may hold it shared
    too.  ``exclusive``: no other holder at all; re-entrant, and inside ``shared`` it
    goes back to shared when it ends (flock converts the hold: the shared one is
    dropped first, so two workers converting at once never deadlock)."""

    def __init__(self, path: str | Path) -> None:
        self._fd = _open(path)
        self._shared = False
        self._depth = 0  # nested exclusive holds
        self.alone = 0  # exclusive holds taken
        self.waited_alone = 0.0  # seconds waited for them

    def close(self) -> None:
        """Closing the only descriptor releases whatever it holds."""
        os.close(self._fd)

    def __enter__(self) -> DeviceLock:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def shared(self) -> Iterator[float]:
        """Hold it shared; yields the seconds waited for that."""
        start = time.monotonic()
        fcntl.flock(self._fd, fcntl.LOCK_SH)
        self._shared = True
        try:
            yield time.monotonic() - start
        finally:
            self._shared = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[float]:
        """Hold it alone; yields the seconds waited for that (0.0 when already held)."""
        if self._depth:
            self._depth += 1
            try:
                yield 0.0
            finally:
                self._depth -= 1
            return
        start = time.monotonic()
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        waited = time.monotonic() - start
        self.alone += 1
        self.waited_alone += waited
        self._depth = 1
        try:
            yield waited
        finally:
            self._depth = 0
            fcntl.flock(self._fd, fcntl.LOCK_SH if self._shared else fcntl.LOCK_UN)
