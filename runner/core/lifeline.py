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
from collections.abc import Callable

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


def child_preexec() -> Callable[[], None]:
    """A ``preexec_fn``: parent-death signal SIGKILL, and exit at once if the parent
    died between the fork and the ``prctl`` (the signal would never come)."""
    parent = os.getpid()

    def _preexec() -> None:
        set_parent_death_signal(signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(137)

    return _preexec


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Kill the process group led by ``pid`` (a child started in its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)
