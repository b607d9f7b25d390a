"""The process-tree clock guard (docs/reliability.md §8): the CPU engine's clock is the worker's
own CPU time (``time.process_time``), which does not count other processes.  An op that
hands its work to a helper process (forked, or a daemon reparented elsewhere) and waits
for it on a pipe looks nearly free to that clock.  Around every timed batch the guard
reads, from ``/proc`` (Linux; elsewhere only ``os.times``):

* the child processes of the worker, and the CPU time of every descendant (alive ones
  from ``/proc/PID/stat``, reaped ones from ``os.times()``'s children fields);
* the CPU time of the worker's threads other than the timing thread (the process's
  CPU time less the thread's);
* the timing thread's own time on a CPU and waiting for one (``/proc/thread-self/
  schedstat``): wall time minus both is time it was blocked, waiting on something.

``check()`` after the timing raises ``ClockBlind`` (named) when a child process was
alive at a batch boundary or used CPU while the batches ran, when other threads of the
worker were busy during them (CPU passes run single-threaded, ``pin_cpu_threads``), or
when the timing thread spent most of the batches blocked: work done elsewhere (the two
thread rules where torch runs one intra-op thread, as the worker pins CPU passes).  A
loaded machine delays the worker in the run queue, which schedstat counts apart, so
preemption is not read as blocking.  Worker-side, standard library only.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PROC = Path("/proc")
# The clocks as bound before any target code ran (the worker imports the runner first).
_process_time = time.process_time
_thread_time = time.thread_time
TICK_S = 1.0 / (os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100)
# What is refused, over all the batches of one timed callable: other processes' or
# threads' CPU time above FOREIGN_SHARE of the batches' wall time, or the timing thread
# blocked for more than BLOCKED_SHARE of it; never below FLOOR_S (clock ticks are 10 ms).
FOREIGN_SHARE = 0.1
BLOCKED_SHARE = 0.5
FLOOR_S = 0.05


class ClockBlind(RuntimeError):
    """Work of a timed call ran where the worker's clock does not see it."""


@dataclass(frozen=True)
class TreeReading:
    """One reading between two batches."""

    wall: float  # perf_counter
    children: tuple[int, ...]  # live (not zombie) child processes of the worker
    children_cpu: float  # CPU seconds of every descendant, alive or reaped
    threads_cpu: float  # CPU seconds of the worker's threads other than this one
    on_cpu: float | None  # this thread: seconds on a CPU and waiting for one (schedstat)


def _stat_fields(path: Path) -> list[str]:
    """The fields after ``(comm)`` of a ``/proc/.../stat`` file (state is [0])."""
    text = path.read_text(encoding="ascii", errors="replace")
    return text[text.rindex(")") + 2 :].split()


def _children_of(pid: int) -> list[int]:
    """Child processes of ``pid``: ``/proc/PID/task/*/children`` where the kernel has
    it, else a scan of ``/proc/*/stat`` for the parent's id."""
    tasks = PROC / str(pid) / "task"
    found: list[int] = []
    try:
        for task in tasks.iterdir():
            found += [int(x) for x in (task / "children").read_text().split()]
        return found
    except OSError:
        pass
    for entry in PROC.iterdir():
        if entry.name.isdigit():
            try:
                if int(_stat_fields(entry / "stat")[1]) == pid:
                    found.append(int(entry.name))
            except (OSError, ValueError, IndexError):
                continue
    return found


def _descendants() -> tuple[list[int], float]:
    """(live children of this process, CPU seconds of all live descendants)."""
    direct: list[int] = []
    cpu = 0.0
    todo = [(os.getpid(), 0)]
    while todo:
        pid, depth = todo.pop()
        for child in _children_of(pid) if depth < 8 else []:
            try:
                fields = _stat_fields(PROC / str(child) / "stat")
            except OSError:
                continue  # gone since it was listed
            if depth == 0 and fields[0] != "Z":
                direct.append(child)
            cpu += (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime
            todo.append((child, depth + 1))
    return direct, cpu


def _other_threads_cpu() -> float:
    """CPU seconds of this process's threads other than the calling one, ended ones
    included (the process's CPU time less this thread's)."""
    return _process_time() - _thread_time()


def _on_cpu() -> float | None:
    """This thread's seconds on a CPU plus waiting in a run queue; None without schedstat."""
    try:
        run_ns, wait_ns, _slices = (PROC / "thread-self" / "schedstat").read_text().split()
    except (OSError, ValueError):
        return None
    return (int(run_ns) + int(wait_ns)) / 1e9


def read_tree() -> TreeReading:
    times = os.times()
    children, live_cpu = _descendants() if PROC.is_dir() else ([], 0.0)
    return TreeReading(
        wall=time.perf_counter(),
        children=tuple(children),
        children_cpu=times.children_user + times.children_system + live_cpu,
        threads_cpu=_other_threads_cpu(),
        on_cpu=_on_cpu(),
    )


@dataclass
class TreeGuard:
    """Readings around each timed batch of one callable, judged by ``check``."""

    wall: float = 0.0
    children_cpu: float = 0.0
    threads_cpu: float = 0.0
    blocked: float = 0.0
    alive: set[int] = field(default_factory=set)
    # children alive before the first batch (a test runner's, a pool made at import):
    # their CPU time still counts, only their being alive does not
    before: set[int] = field(default_factory=set)
    _last: TreeReading | None = None

    def start(self) -> None:
        """Before a batch (the last batch's closing reading serves when there is one:
        a scan of ``/proc`` costs a few milliseconds where the kernel lists no children)."""
        if self._last is None:
            self._last = read_tree()
            self.before.update(self._last.children)

    def stop(self) -> None:
        """After a batch: add what happened since ``start``."""
        before, after = self._last, read_tree()
        if before is None:
            return
        wall = after.wall - before.wall
        self.wall += wall
        self.children_cpu += max(0.0, after.children_cpu - before.children_cpu)
        self.threads_cpu += max(0.0, after.threads_cpu - before.threads_cpu)
        if before.on_cpu is not None and after.on_cpu is not None:
            self.blocked += max(0.0, wall - (after.on_cpu - before.on_cpu))
        self.alive.update(set(after.children) - self.before)
        self._last = after

    def problems(self) -> list[str]:
        """What the clock missed.  The thread rules hold where torch runs one intra-op
        thread (the worker pins CPU passes so): with more, torch's own pool works beside
        the timing thread, which waits for it at the end of each op (their CPU time is
        the process's, which the clock counts)."""
        wall, found = self.wall, []
        torch = sys.modules.get("torch")
        pinned = torch is None or torch.get_num_threads() == 1
        if self.alive:
            found.append(f"child process(es) {sorted(self.alive)} alive during timing")
        if self.children_cpu > max(FLOOR_S, FOREIGN_SHARE * wall):
            found.append(
                f"child processes used {self.children_cpu:.3f} s of CPU during "
                f"{wall:.3f} s of timed batches"
            )
        if pinned and self.threads_cpu > max(FLOOR_S, FOREIGN_SHARE * wall):
            found.append(
                f"threads other than the timing thread used {self.threads_cpu:.3f} s of CPU "
                f"during {wall:.3f} s of timed batches (CPU passes run single-threaded)"
            )
        if pinned and self.blocked > max(FLOOR_S, BLOCKED_SHARE * wall):
            found.append(
                f"the timing thread was blocked (neither on a CPU nor waiting for one) "
                f"{self.blocked:.3f} s of {wall:.3f} s of timed batches"
            )
        return found

    def check(self) -> None:
        """Raise ``ClockBlind`` naming what the worker's clock could not see."""
        found = self.problems()
        if found:
            raise ClockBlind(
                "process-tree clock guard: "
                + "; ".join(found)
                + ": work done outside the timed process escapes its clock, refusing "
                "these timings (do the op's work in the calling thread)"
            )
