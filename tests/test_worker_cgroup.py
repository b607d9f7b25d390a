"""A local serving worker's own cgroup (``runner.core.cgroup``): what a process the
worker detached uses is counted there and not in the worker's process tree, an honest
worker's children are in its tree, what is left in the cgroup when the worker ends is
killed with it, a worker on a GPU gets its cgroup as one on the CPU does, and the empty
cgroups a killed host left are pruned.  Real processes in a real cgroup v2 hierarchy;
skipped where none is writable (the guard is off there: the turn records no figure, and
why)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.core.cgroup import FOREIGN_FLOOR_S, ForeignClock, WorkerCgroup
from runner.core.processes import pid_alive, run, start
from runner.executors.base import LiveWorker, WorkerJob
from runner.executors.local import LocalExecutor

BURN = "end = time.process_time() + 0.5\nwhile time.process_time() < end: pass\n"
DETACHED = (
    "import os, sys, time\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
    "        while True: pass\n"
    "    os._exit(0)\n"
    "time.sleep(30)\n"
)
# 0.5 s of CPU of its own, then 0.5 s of a child it waits for, then it says so
HONEST = (
    "import subprocess, sys, time\n"
    + BURN
    + f"subprocess.run([sys.executable, '-c', {('import time' + chr(10) + BURN)!r}])\n"
    + "open(sys.argv[1], 'w').write('done')\n"
    + "time.sleep(30)\n"
)


@pytest.fixture
def group() -> Iterator[WorkerCgroup]:
    made = WorkerCgroup.create("test-worker")
    if made is None:
        pytest.skip("no writable cgroup v2 hierarchy on this host")
    yield made
    made.kill()
    made.remove()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()


def _started(
    procs: list[subprocess.Popen[bytes]], group: WorkerCgroup, code: str, tmp_path: Path, *args: str
) -> int:
    proc = start(
        [sys.executable, "-c", code, *args],
        stderr_path=tmp_path / "stderr.log",
        cgroup_procs=group.procs,
    )
    procs.append(proc)
    assert proc.pid in group.members()  # it joined before it ran anything
    return proc.pid


def _wait_for_text(path: Path) -> str:
    end = time.monotonic() + 30
    while time.monotonic() < end:
        if path.is_file() and path.read_text():
            return path.read_text()
        time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


def test_a_detached_helper_is_counted_in_the_cgroup_and_killed_with_it(
    group: WorkerCgroup, procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    _started(procs, group, DETACHED, tmp_path, str(tmp_path / "helper.pid"))
    helper = int(_wait_for_text(tmp_path / "helper.pid"))
    worker = group.members()[0]
    clock = ForeignClock(group, worker)
    clock.start()
    end = time.monotonic() + 20  # the helper spins on a core of its own or a shared one
    while (foreign := clock.foreign_seconds()) < 0.3 and time.monotonic() < end:
        time.sleep(0.1)
    assert foreign >= 0.3, foreign
    assert helper in group.members() and os.getsid(helper) != os.getsid(worker)
    group.kill()
    end = time.monotonic() + 5
    while pid_alive(helper) and time.monotonic() < end:
        time.sleep(0.02)
    assert not pid_alive(helper)
    group.remove()
    assert not group.path.exists()


def test_an_honest_worker_and_the_child_it_waits_for_are_its_own_tree(
    group: WorkerCgroup, procs: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    worker = _started(procs, group, HONEST, tmp_path, str(tmp_path / "done"))
    clock = ForeignClock(group, worker)
    clock.start()
    _wait_for_text(tmp_path / "done")  # its own 0.5 s, then its child's, reaped
    assert clock.foreign_seconds() < FOREIGN_FLOOR_S
    assert (group.cpu_seconds() or 0.0) - clock.cgroup_s > 0.8  # both were in the cgroup


def _waiting_job(tmp_path: Path, gpus: tuple[int, ...] = ()) -> WorkerJob:
    """A job whose worker waits, alive, on its spec: a FIFO nobody writes."""
    spec = tmp_path / "spec.json"
    os.mkfifo(spec)
    return WorkerJob("pass-01-candidate", spec, tmp_path, tmp_path / "out", gpus=gpus)


def _ended(live: LiveWorker) -> None:
    assert live.proc is not None
    live.proc.kill()
    live.proc.wait()
    for stream in (live.proc.stdin, live.proc.stdout):
        if stream is not None:
            stream.close()
    live.release()


def test_a_worker_on_a_gpu_starts_in_a_cgroup_of_its_own(
    group: WorkerCgroup, tmp_path: Path
) -> None:
    # measured on a GPU before it stayed (docs/benchmarks.md, "The cgroup CPU guard on
    # one H100")
    live = LocalExecutor().start_worker(_waiting_job(tmp_path, gpus=(0,)))
    assert live.proc is not None
    try:
        assert live.cgroup is not None
        assert live.proc.pid in live.cgroup.members()
        clock, off = live.cpu_clock()
        assert clock is not None and clock.pid == live.proc.pid and off == ""
    finally:
        _ended(live)
    assert live.cgroup is not None and not live.cgroup.path.exists()


def test_a_worker_the_guard_cannot_read_says_why(tmp_path: Path) -> None:
    # its turns record the reason beside a null foreign_cpu_s (runner.measure.paired)
    live = LocalExecutor(cgroups=False).start_worker(_waiting_job(tmp_path))
    try:
        assert live.cpu_clock() == (None, "cgroups off for this executor")
    finally:
        _ended(live)


def test_an_empty_cgroup_a_gone_host_left_is_pruned_and_a_running_host_s_kept(
    group: WorkerCgroup,
) -> None:
    gone = int(run([sys.executable, "-c", "import os; print(os.getpid())"]).stdout or "0")
    assert gone and not pid_alive(gone)
    stale = group.path.parent / f"pass-01-candidate-{gone}-0"
    # a host that runs (this test's parent) may be about to move its worker in
    running = group.path.parent / f"pass-01-candidate-{os.getppid()}-0"
    stale.mkdir()
    running.mkdir()
    try:
        made = WorkerCgroup.create("next-worker")
        assert made is not None
        made.remove()
        assert not stale.exists()
        assert running.exists()
    finally:
        for path in (stale, running):
            if path.exists():
                path.rmdir()
