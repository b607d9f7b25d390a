"""Exclusive, crash-safe GPU leases on one host.

One lock file per GPU index under the lease folder (``CAMPAIGN_LEASE_DIR``, default
``/tmp/turbo-campaign-leases``), held with ``fcntl.flock`` for the life of the holder.
The kernel drops a flock when the last file descriptor of its open file goes away, so
a holder that crashes or is killed with SIGKILL frees its GPUs at once: there is no
stale-lock cleanup to get wrong.  The holder writes who it is (pid, campaign, round,
start time, host) into the file for ``campaign status``; that text is display only and
never decides anything.  A file whose lock is free shows as free, whatever it says.

The lock files are never deleted (deleting a lock file while another process waits on
it would let two processes hold "the same" lock on different inodes); a release
empties the file before unlocking.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TypedDict

from runner.core.errors import ConfigError, GpuBusy

LEASE_DIR_ENV = "CAMPAIGN_LEASE_DIR"
DEFAULT_LEASE_DIR = Path("/tmp/turbo-campaign-leases")
POLL_S = 0.1
# A `list_leases` probe holds a GPU's lock for microseconds; a plain acquire retries
# this long before it calls the GPU busy, so `campaign status` never fails a round.
GRACE_S = 0.3


@dataclass(frozen=True)
class LeaseInfo:
    """One GPU's lease as ``campaign status`` shows it."""

    gpu: int
    held: bool
    pid: int | None = None
    campaign: str | None = None
    round: int | None = None
    started: str | None = None
    host: str | None = None

    def describe(self) -> str:
        if not self.held:
            return f"GPU {self.gpu}: free"
        who = self.campaign or "unknown campaign"
        rnd = f", round {self.round}" if self.round is not None else ""
        since = f", since {self.started}" if self.started else ""
        return f"GPU {self.gpu}: leased by {who} (pid {self.pid}{rnd}{since})"


def lease_dir() -> Path:
    return Path(os.environ.get(LEASE_DIR_ENV) or DEFAULT_LEASE_DIR)


def lock_path(gpu: int, root: Path | None = None) -> Path:
    return (root or lease_dir()) / f"gpu-{gpu}.lock"


def parse_gpus(text: str) -> list[int]:
    """``"0,1"`` -> ``[0, 1]``; ConfigError for anything but distinct indices >= 0."""
    try:
        gpus = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ConfigError(
            f"--gpus {text!r}: give GPU indices separated by commas, e.g. 0,1"
        ) from None
    if not gpus or any(g < 0 for g in gpus) or len(set(gpus)) != len(gpus):
        raise ConfigError(f"--gpus {text!r}: give distinct GPU indices >= 0, e.g. 0,1")
    return gpus


def _ensure_dir(root: Path) -> None:
    if root.is_dir():
        return
    root.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        root.chmod(0o1777)  # shared by every user of the host, like /tmp


def _open(path: Path) -> int:
    _ensure_dir(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    with contextlib.suppress(PermissionError):
        os.fchmod(fd, 0o666)  # another user's campaign must be able to take it later
    return fd


def _try_lock(fd: int, mode: int = fcntl.LOCK_EX) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


class HolderRecord(TypedDict, total=False):
    """What a lease's holder writes into its lock file (``acquire``)."""

    pid: int
    campaign: str
    round: int | None
    started: str
    host: str
    gpus: list[int]


def _read_holder(path: Path) -> HolderRecord:
    try:
        data: HolderRecord = json.loads(path.read_text(encoding="utf-8") or "{}")
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _info(gpu: int, held: bool, holder: HolderRecord) -> LeaseInfo:
    if not held:
        return LeaseInfo(gpu, False)
    rnd = holder.get("round")
    return LeaseInfo(
        gpu,
        True,
        pid=holder.get("pid"),
        campaign=holder.get("campaign"),
        round=int(rnd) if rnd is not None else None,
        started=holder.get("started"),
        host=holder.get("host"),
    )


def _busy_message(busy: Sequence[LeaseInfo], waited: float) -> str:
    lines = [info.describe() for info in busy]
    after = f" after waiting {waited:.0f} s" if waited > 0 else ""
    return (
        f"GPU(s) busy{after}:\n  "
        + "\n  ".join(lines)
        + "\nWait for that round to finish (or pass a wait, e.g. --gpu-wait 600), pick "
        "free GPUs with --gpus (`campaign status` lists the leases), or, if that process "
        "is gone, check that no other process still holds the lock file open."
    )


_HELD: dict[int, int] = {}  # fd -> gpu, every lease this process holds


def held_fds() -> list[int]:
    """The lock descriptors of every lease this process holds.  Workers inherit them
    (``runner.core.processes.run(pass_fds=...)``): a flock lasts until the last descriptor of its
    open file closes, so a GPU stays leased until every worker on it has exited, even
    when the campaign process itself was killed."""
    return sorted(_HELD)


class Lease:
    """GPUs held by this process until ``release`` (or the end of the ``with``)."""

    def __init__(self, gpus: Sequence[int], fds: dict[int, int], root: Path) -> None:
        self.gpus = tuple(gpus)
        self._fds = fds
        self.root = root
        _HELD.update({fd: gpu for gpu, fd in fds.items()})

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def release(self) -> None:
        """Empty each lock file, then unlock and close it; safe to call twice."""
        fds, self._fds = self._fds, {}
        for fd in fds.values():
            _HELD.pop(fd, None)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)  # closing the only descriptor drops the flock


def _write_holder(fd: int, record: HolderRecord) -> None:
    data = (json.dumps(record) + "\n").encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _try_all(gpus: Sequence[int], root: Path) -> tuple[dict[int, int], list[int]]:
    """Lock every GPU or none: the fds taken, and the GPUs that were busy."""
    taken: dict[int, int] = {}
    busy: list[int] = []
    for gpu in sorted(gpus):  # one global order: no deadlock between two acquirers
        fd = _open(lock_path(gpu, root))
        if _try_lock(fd):
            taken[gpu] = fd
        else:
            os.close(fd)
            busy.append(gpu)
    if busy:
        for fd in taken.values():
            os.close(fd)
        taken = {}
    return taken, busy


def acquire(
    gpus: Sequence[int],
    campaign: str,
    *,
    wait: float = 0,
    round: int | None = None,
    root: Path | None = None,
) -> Lease:
    """Lease all of ``gpus`` for this process, or none of them.

    Retries until ``wait`` seconds have passed (at least ``GRACE_S``); then raises
    GpuBusy naming the holders.  Use as a context manager or call ``release``.
    """
    if not gpus or len(set(gpus)) != len(gpus):
        raise ConfigError(f"lease request {list(gpus)}: give distinct GPU indices")
    root = root or lease_dir()
    start = time.monotonic()
    deadline = start + max(wait, GRACE_S)
    while True:
        fds, busy = _try_all(gpus, root)
        if fds:
            break
        if time.monotonic() >= deadline:
            infos = [_probe(gpu, root) for gpu in busy]
            raise GpuBusy(_busy_message(infos, time.monotonic() - start if wait else 0))
        time.sleep(POLL_S)
    record: HolderRecord = {
        "pid": os.getpid(),
        "campaign": campaign,
        "round": round,
        "started": datetime.now().isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "gpus": sorted(gpus),
    }
    for fd in fds.values():
        _write_holder(fd, record)
    return Lease(list(gpus), fds, root)


def _probe(gpu: int, root: Path) -> LeaseInfo:
    """Whether ``gpu`` is held now, and by whom (a brief shared-lock test)."""
    path = lock_path(gpu, root)
    fd = _open(path)
    try:
        free = _try_lock(fd, fcntl.LOCK_SH)
        holder = {} if free else _read_holder(path)
    finally:
        os.close(fd)
    return _info(gpu, not free, holder)


def _known_gpus(root: Path) -> Iterator[int]:
    if not root.is_dir():
        return
    for path in root.glob("gpu-*.lock"):
        index = path.stem.removeprefix("gpu-")
        if index.isdigit():
            yield int(index)


def list_leases(root: Path | None = None) -> list[LeaseInfo]:
    """Every GPU that has a lock file, by index; a file left by a dead holder is free."""
    root = root or lease_dir()
    return [_probe(gpu, root) for gpu in sorted(_known_gpus(root))]
