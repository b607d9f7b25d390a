"""A child process that dies with its parent (Linux): its own process group, so the
whole group can be killed at once, and the parent-death signal (``prctl
PR_SET_PDEATHSIG``), so a ``kill -9`` of the campaign also kills its workers.

``child_preexec`` is a ``preexec_fn`` for ``subprocess``; it runs in the forked child
before ``exec``.  It is used by ``runner.core.processes.run`` (host side, for workers) and by the
worker for the commands it starts (the focused test), so no process outlives the
campaign that started it.  On other systems it does nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from runner.core.files import write_control

PR_SET_PDEATHSIG = 1


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent dies."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        return False


def child_preexec(join: Path | None = None) -> Callable[[], None]:
    """A ``preexec_fn``: parent-death signal SIGKILL, and exit at once if the parent
    died between the fork and the ``prctl`` (the signal would never come); with
    ``join`` (a cgroup's ``cgroup.procs``, ``runner.core.cgroup``) the child moves
    into that cgroup before it runs anything, so all it starts is counted there."""
    parent = os.getpid()
    target = os.fsencode(join) if join is not None else None

    def _preexec() -> None:
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(137)
        if target is not None:  # the parent checks that it joined
            with contextlib.suppress(OSError):
                write_control(target, b"0")

    return _preexec


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill the process group led by ``pid`` (a child started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


STOP_WAIT_S = 1.0  # at most this long for a stopped group's threads to be stopped
STOPPED_STATES = frozenset("TtZX")  # stopped, traced, or gone


def _group_tasks(groups: set[int]) -> list[Path]:
    """The ``/proc/<pid>/task/<tid>/stat`` files of every process whose process group
    is in ``groups``."""
    found: list[Path] = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) in groups:  # field 5 of stat: the process group
                found.extend(proc.glob("task/*/stat"))
        except (OSError, IndexError, ValueError):
            continue  # it ended meanwhile
    return found


def _running(stat: Path) -> bool:
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] not in STOPPED_STATES
    except (OSError, IndexError):
        return False


def _wait_tasks(tasks: list[Path], timeout: float) -> list[Path]:
    """Poll ``tasks`` (their stat files) until none runs or ``timeout`` s have passed;
    the ones still running."""
    deadline = time.monotonic() + timeout
    while True:
        tasks = [t for t in tasks if _running(t)]
        if not tasks or time.monotonic() > deadline:
            return tasks
        time.sleep(0.0002)


def wait_pids_stopped(pids: list[int], timeout: float = STOP_WAIT_S) -> list[Path]:
    """``wait_stopped`` for the processes ``pids`` themselves (not their groups)."""
    if not pids or not sys.platform.startswith("linux"):
        return []
    return _wait_tasks(
        [t for pid in pids for t in Path(f"/proc/{pid}/task").glob("*/stat")], timeout
    )


def wait_stopped(groups: set[int], timeout: float = STOP_WAIT_S) -> list[Path]:
    """Wait until every thread of every process in the process ``groups`` has stopped
    (SIGSTOP takes effect when each thread next enters the kernel: on a loaded virtual
    machine that took milliseconds); the tasks still running after ``timeout`` s."""
    if not groups or not sys.platform.startswith("linux"):
        return []
    return _wait_tasks(_group_tasks(groups), timeout)
