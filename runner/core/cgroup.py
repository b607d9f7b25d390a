"""Each local serving worker in a control group of its own (cgroup v2), so the host can
count the CPU time of everything the worker started, a process it detached included.

A process the worker double-forks into a new session is no longer its descendant and
leaves its process group: the worker's own ``/proc`` accounting (``runner.worker.bench.proctree``)
and the SIGSTOP of the idle partner (``runner.measure.paired.others_stopped``) do not see
it.  Its cgroup still holds it: a process joins its parent's cgroup at fork and only a
write into another cgroup's ``cgroup.procs`` moves it.  So around each timed turn the host
reads the cgroup's ``cpu.stat`` (``usage_usec``) and the worker's process tree from
``/proc``; what the cgroup used beyond the tree ran beside the timing, outside every other
guard (``foreign_seconds``).  When the worker ends, whatever is left in its cgroup is
killed (``cgroup.kill``) and the cgroup removed; the empty ones a killed host left
behind are removed by the next ``WorkerCgroup.create`` (``prune_stale``).

Where no cgroup v2 hierarchy is writable (not root, a read-only ``/sys/fs/cgroup``)
``WorkerCgroup.create`` returns None and the turn records no figure, and why
(``NO_CGROUP``, ``runner.executors.base.LiveWorker.cpu_clock``).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from runner.core.files import write_control
from runner.core.processes import pid_alive

# a turn fails when its worker's cgroup used more CPU time than its process tree by more
# than FOREIGN_SHARE of the turn's wall time, never below FOREIGN_FLOOR_S (/proc counts
# in 10 ms clock ticks), as the worker's own tree guard (runner.worker.bench.proctree) judges
FOREIGN_SHARE = 0.1
FOREIGN_FLOOR_S = 0.05
# why a turn records no figure where ``WorkerCgroup.create`` made no cgroup
NO_CGROUP = "no cgroup could be made for the worker (no writable cgroup v2 hierarchy)"
PARENT = "turbo-campaign"  # the folder of the workers' cgroups under the host's own
_COUNTER = itertools.count()
CLOCK_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_ESCAPE = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space as \040


def _unescape(field: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def unified_folder(cgroups: str, mountinfo: str) -> Path | None:
    """A process's folder in the unified (cgroup v2) hierarchy, from its
    ``/proc/<pid>/cgroup`` text (the ``0::PATH`` line, relative to the root of its cgroup
    namespace) and this host's ``mountinfo``: under the first cgroup2 mount whose root
    (field 4, the part of the hierarchy it shows) holds the path, at its mount point
    (field 5).  None where there is no such mount: none at all (a v1-only host), or only
    ones that show another part of the hierarchy."""
    path = next((line[3:] for line in cgroups.splitlines() if line.startswith("0::")), None)
    if path is None:
        return None
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        head = fields.split()
        if len(head) < 5 or tail.split(" ", 1)[0] != "cgroup2":
            continue
        root = _unescape(head[3]).rstrip("/")
        if path == root or path.startswith(root + "/"):
            return Path(_unescape(head[4])) / path[len(root) :].lstrip("/")
    return None


def v1_folder(cgroups: str, mountinfo: str, controller: str = "cpuacct") -> Path | None:
    """A process's folder in the cgroup v1 hierarchy of ``controller``, from its
    ``/proc/<pid>/cgroup`` text (the ``N:CONTROLLERS:PATH`` line naming it) and this
    host's ``mountinfo`` (a ``cgroup`` mount whose super options name it, at its mount
    point, under the part of the hierarchy it shows).  None where no such line or mount."""
    path = None
    for line in cgroups.splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3 and controller in parts[1].split(","):
            path = parts[2]
    if path is None:
        return None
    for line in mountinfo.splitlines():
        fields, _, tail = line.partition(" - ")
        head, parts = fields.split(), tail.split()
        if len(head) < 5 or len(parts) < 3 or parts[0] != "cgroup":
            continue
        if controller not in parts[2].split(","):
            continue
        root = _unescape(head[3]).rstrip("/")
        if path == root or path.startswith(root + "/"):
            return Path(_unescape(head[4])) / path[len(root) :].lstrip("/")
    return None


def _own_base() -> Path | None:
    """The host process's own cgroup v2 folder (``unified_folder``); None without one."""
    try:
        cgroups = Path("/proc/self/cgroup").read_text(encoding="utf-8")
        mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
    except OSError:
        return None
    return unified_folder(cgroups, mountinfo)


@dataclass(frozen=True)
class WorkerCgroup:
    """One worker's cgroup folder."""

    path: Path

    @classmethod
    def create(cls, name: str) -> WorkerCgroup | None:
        """A new, empty cgroup for the worker ``name`` under the host's own; None where
        none can be made."""
        base = _own_base()
        if base is None:
            return None
        safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)[:80]
        path = base / PARENT / f"{safe}-{os.getpid()}-{next(_COUNTER)}"
        prune_stale(path.parent)
        try:
            path.mkdir(parents=True)
        except OSError:
            return None
        group = cls(path)
        if group.cpu_seconds() is None:
            group.remove()
            return None
        return group

    @property
    def procs(self) -> Path:
        """The file a process writes ``0`` into to join (``runner.core.lifeline``)."""
        return self.path / "cgroup.procs"

    def cpu_seconds(self) -> float | None:
        """CPU time used by every process that was in the cgroup (``usage_usec``)."""
        try:
            for line in (self.path / "cpu.stat").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "usage_usec":
                    return int(value) / 1e6
        except (OSError, ValueError):
            return None
        return None

    def members(self) -> list[int]:
        try:
            return [int(p) for p in self.procs.read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        """Every process still in the cgroup killed (``cgroup.kill``, else one by one)."""
        with contextlib.suppress(OSError):
            write_control(self.path / "cgroup.kill", b"1")
            return
        for pid in self.members():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the cgroup once its killed processes are gone (left in place when
        they are not after ``wait_s``: an empty folder, harmless)."""
        end = time.monotonic() + wait_s
        while True:
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                if time.monotonic() > end:
                    return
                time.sleep(0.02)


def _host_pid(folder: Path) -> int | None:
    """The pid of the host that made the worker cgroup ``folder`` (its name's
    ``-<pid>-<n>`` tail, ``WorkerCgroup.create``); None for another name."""
    parts = folder.name.rsplit("-", 2)
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    return int(parts[1])


def prune_stale(parent: Path) -> None:
    """Remove the empty worker cgroups under ``parent`` whose host is gone (a host
    killed before it removed them).  A cgroup whose host still runs is left alone, even
    empty: that host may be about to move its worker in; one that still holds a process
    cannot be removed and stays."""
    try:
        folders = [p for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return
    for folder in folders:
        pid = _host_pid(folder)
        if pid is not None and pid != os.getpid() and not pid_alive(pid):
            with contextlib.suppress(OSError):
                folder.rmdir()


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    return text.rsplit(")", 1)[1].split()


def children(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError, ValueError):
            found += [int(c) for c in task.read_text().split()]
    return found


def first_child(pid: int) -> int | None:
    """The child of ``pid`` that started first (``/proc`` ``starttime``); None if none."""
    started: list[tuple[int, int]] = []
    for child in children(pid):
        with contextlib.suppress(OSError, IndexError, ValueError):
            started.append((int(_stat_fields(child)[19]), child))
    return min(started)[1] if started else None


def tree_cpu_seconds(pid: int, depth: int = 0) -> float:
    """CPU time of ``pid`` (its threads, and its children it reaped) and of its live
    descendants, from ``/proc`` (``utime``, ``stime``, ``cutime``, ``cstime``).  The
    children are read before their parent: one reaped in between is counted twice,
    never missed (an honest worker's reaped child never reads as foreign time)."""
    kids = children(pid) if depth < 64 else []
    total = sum(tree_cpu_seconds(c, depth + 1) for c in kids)
    try:
        fields = _stat_fields(pid)
    except OSError:
        return total  # ended: its time is in its parent's cutime once reaped
    return total + sum(int(x) for x in fields[11:15]) * CLOCK_TICK_S


class CpuAccount(Protocol):
    """A cgroup the host reads the CPU time of."""

    def cpu_seconds(self) -> float | None: ...


@dataclass(frozen=True)
class ContainerCgroup:
    """A container's cgroup: made, killed and removed by its runtime, only read by the
    host.  Its CPU time is the unified hierarchy's ``cpu.stat`` (``usage_usec``) where the
    container has a folder there, else cgroup v1's ``cpuacct.usage`` (nanoseconds)."""

    path: Path
    v1: bool = False

    @classmethod
    def of_pid(cls, pid: int) -> ContainerCgroup | None:
        """The cgroup of the host process ``pid`` (the container's first process); None
        where neither hierarchy gives one whose CPU time the host can read."""
        try:
            cgroups = Path(f"/proc/{pid}/cgroup").read_text(encoding="utf-8")
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return None
        return cls.from_texts(cgroups, mountinfo)

    @classmethod
    def from_texts(cls, cgroups: str, mountinfo: str) -> ContainerCgroup | None:
        """``of_pid`` from a process's ``/proc/<pid>/cgroup`` and the host's mountinfo."""
        unified = unified_folder(cgroups, mountinfo)
        if unified is not None and cls(unified).cpu_seconds() is not None:
            return cls(unified)
        legacy = v1_folder(cgroups, mountinfo)
        if legacy is not None and cls(legacy, v1=True).cpu_seconds() is not None:
            return cls(legacy, v1=True)
        return None

    def cpu_seconds(self) -> float | None:
        if not self.v1:
            return WorkerCgroup(self.path).cpu_seconds()
        try:
            return int((self.path / "cpuacct.usage").read_text().strip()) / 1e9
        except (OSError, ValueError):
            return None


@dataclass
class ForeignClock:
    """What a worker's cgroup used beyond the worker's process tree over one span."""

    group: CpuAccount
    pid: int
    cgroup_s: float = 0.0
    tree_s: float = 0.0

    def start(self) -> None:
        self.cgroup_s = self.group.cpu_seconds() or 0.0
        self.tree_s = tree_cpu_seconds(self.pid)

    def foreign_seconds(self) -> float:
        """The cgroup's CPU time since ``start`` less the tree's (never below 0)."""
        used = (self.group.cpu_seconds() or 0.0) - self.cgroup_s
        tree = tree_cpu_seconds(self.pid) - self.tree_s
        return max(0.0, used - tree)
