"""The device's preparation lock (runner.core.prepare_lock): real processes that hold
it alone never overlap, shared holders do while no one holds it alone, a holder killed
with the lock frees it, the host names one file per physical device, and a serving
worker on the CPU takes no lock."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import runner
from runner.core.prepare_lock import (
    COMMAND_LOCK_ENV,
    PREPARE_LOCK_ENV,
    DeviceLock,
    device_key,
    lock_path,
)
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings
from runner.core.startup import SYSPATH_ENV, isolated_command
from runner.executors.base import WorkerJob
from runner.executors.local import LocalExecutor, prepare_lock_env
from runner.measure.host import PlainHost
from runner.measure.paired import READY_TIMEOUT_ENV, measure_paired
from runner.worker.bench import autotune_alone

ROOT = str(Path(runner.__file__).resolve().parent.parent)
# Appends "start <pid> <time>" and "end <pid> <time>" around a held section, 5 times.
SECTIONS = """
import os, sys, time
from runner.core.prepare_lock import DeviceLock
lock, record = DeviceLock(sys.argv[1]), sys.argv[2]
def note(what):
    with open(record, "a") as out:
        out.write(f"{what} {os.getpid()} {time.time():.6f}\\n")
for _ in range(5):
    with lock.exclusive():
        note("start")
        time.sleep(0.05)
        note("end")
    time.sleep(0.01)
"""
# A preparing worker: shared sections of 0.2 s, each with one exclusive 0.05 s inside
# (its autotune).  Records with pid and time the spans of its shared work ("shared" to
# "asks", "done" to "unshared": asking to be alone drops the shared hold) and of its
# exclusive work ("alone" to "done").
PREPARING = """
import os, sys, time
from runner.core.prepare_lock import DeviceLock
lock, record = DeviceLock(sys.argv[1]), sys.argv[2]
def note(what):
    with open(record, "a") as out:
        out.write(f"{what} {os.getpid()} {time.time():.6f}\\n")
for _ in range(3):
    with lock.shared():
        note("shared")
        time.sleep(0.1)
        note("asks")
        with lock.exclusive():
            note("alone")
            with lock.exclusive():  # re-entrant: no second wait, no release
                time.sleep(0.05)
            note("done")
        time.sleep(0.1)
        note("unshared")
print(lock.alone, flush=True)
"""
# Takes the lock, says so, and sleeps until killed.
HOLDER = """
import sys, time
from runner.core.prepare_lock import DeviceLock
with DeviceLock(sys.argv[1]) as lock, lock.exclusive():
    print("held", flush=True)
    time.sleep(600)
"""


def _python(code: str, *args: str, stdout: int | None = None) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, text=True, stdout=stdout)


def test_two_processes_holding_the_lock_never_overlap(tmp_path: Path) -> None:
    lock, record = tmp_path / "gpu-0.lock", tmp_path / "sections.txt"
    procs = [_python(SECTIONS, str(lock), str(record)) for _ in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    lines = [line.split() for line in record.read_text().splitlines()]
    assert len(lines) == 2 * 2 * 5 and len({pid for _, pid, _ in lines}) == 2
    sections = list(zip(lines[::2], lines[1::2], strict=True))
    for (what, pid, _), (then, pid2, _) in sections:
        assert (what, then, pid) == ("start", "end", pid2)  # no other start in between
    spans = sorted((float(a[2]), float(b[2])) for a, b in sections)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start


def _spans(record: Path, opened: str, closed: str) -> list[tuple[str, float, float]]:
    """(pid, start, end) of every section a process opened and closed in ``record``."""
    open_at: dict[str, float] = {}
    spans = []
    for what, pid, at in (line.split() for line in record.read_text().splitlines()):
        if what == opened:
            open_at[pid] = float(at)
        elif what == closed:
            spans.append((pid, open_at.pop(pid), float(at)))
    return spans


def test_shared_holders_overlap_and_an_exclusive_hold_overlaps_none(tmp_path: Path) -> None:
    lock, record = tmp_path / "gpu-0.lock", tmp_path / "sections.txt"
    procs = [_python(PREPARING, str(lock), str(record), stdout=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=60)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert [int(o) for o in outs] == [3, 3, 3]  # the nested hold was not counted
    shared = _spans(record, "shared", "asks") + _spans(record, "done", "unshared")
    alone = _spans(record, "alone", "done")
    assert len(shared) == 18 and len(alone) == 9
    for pid, start, end in alone:
        for other, s0, s1 in shared:  # no other process inside a shared hold meanwhile
            assert other == pid or s1 <= start or end <= s0, (pid, other)
    overlapping = [
        (a, b)
        for a, b in itertools.combinations(shared, 2)
        if a[0] != b[0] and a[1] < b[2] and b[1] < a[2]
    ]
    assert overlapping, "shared holds never overlapped: the lock serialised them"


def test_a_holder_killed_with_the_lock_frees_it(tmp_path: Path) -> None:
    lock = tmp_path / "gpu-0.lock"
    with _python(HOLDER, str(lock), stdout=subprocess.PIPE) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        finally:
            holder.send_signal(signal.SIGKILL)  # dies holding it
            holder.wait(timeout=30)
    t0 = time.monotonic()
    with DeviceLock(lock) as held, held.exclusive() as waited:
        assert waited < 5.0
    assert time.monotonic() - t0 < 5.0


SHARED_HOLDER = """
import sys, time
from runner.core.prepare_lock import DeviceLock
with DeviceLock(sys.argv[1]) as lock, lock.shared():
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


class _Tuner:
    """Triton's ``Autotuner.check_disk_cache`` contract (triton 3.6.0): a result kept
    for the key is read and True returned, else ``bench_fn`` times the configs and the
    result is kept."""

    def __init__(self) -> None:
        self.kept: dict[str, str] = {}
        self.timed = 0

    def check_disk_cache(self, key: str, configs: list[str], bench_fn: Callable[[], None]) -> bool:
        if key in self.kept:
            return True
        bench_fn()
        self.kept[key] = configs[0]
        return False


def test_a_kept_autotune_result_is_read_without_waiting_to_be_alone(tmp_path: Path) -> None:
    """Another worker prepares under a shared hold for 3 s: a result already kept is
    read at once, outside the exclusive hold; a missing one waits to be alone and is
    timed once."""
    lock = tmp_path / "gpu-0.lock"
    tuner = _Tuner()
    tuner.kept["k1"] = "c1"
    read = autotune_alone.alone_on_device(_Tuner.check_disk_cache)

    def time_configs() -> None:
        tuner.timed += 1

    with _python(SHARED_HOLDER, str(lock), "3", stdout=subprocess.PIPE) as other:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with DeviceLock(lock) as held, autotune_alone.holding(held):
            t0 = time.monotonic()
            assert read(tuner, "k1", ["c1"], time_configs) is True
            assert time.monotonic() - t0 < 1.0 and held.alone == 0 and tuner.timed == 0
            assert read(tuner, "k2", ["c2"], time_configs) is False
            assert held.alone == 1 and held.waited_alone > 1.0 and tuner.timed == 1
        assert other.wait(timeout=30) == 0


class _Sweep(_Tuner):
    """``_Tuner`` with Triton's sweep: the timing function calls ``_bench`` once per
    config (``Autotuner.run``'s ``benchmark``), ``_bench`` hooked as ``install`` hooks
    it, under a stand-in of ``autotune_compile``'s wrapper that records the first
    config's compile of the sweep and whether the device was held alone then."""

    def __init__(self, lock: DeviceLock) -> None:
        super().__init__()
        self.lock = lock
        self.events: list[tuple[str, int]] = []  # (what, exclusive holds so far)
        bench = autotune_alone.alone_on_device(self.time_one)
        self.bench = self.compiling_first(bench)

    def compiling_first(self, bench: Callable[[str], None]) -> Callable[[str], None]:
        def wrapper(config: str) -> None:
            if not self.events:  # once a sweep, as its ``run`` call names it
                self.events.append(("compiled", self.lock.alone))
            bench(config)

        return wrapper

    def time_one(self, config: str) -> None:
        self.events.append((f"timed {config}", self.lock.alone))

    def sweep(self, key: str, configs: list[str]) -> bool:
        read = autotune_alone.alone_on_device(_Tuner.check_disk_cache)

        def benchmark() -> None:
            for config in configs:
                self.bench(config)

        # Triton's own, which times through ``_bench`` (another is run only in the hold)
        benchmark.__module__, benchmark.__qualname__ = autotune_alone.BENCHMARK
        return bool(read(self, key, configs, benchmark))


def test_a_missing_result_is_compiled_before_waiting_to_be_alone(tmp_path: Path) -> None:
    """A miss compiles its sweep's configs while another worker holds the device shared
    (no exclusive hold yet), then waits, and times each config once, alone."""
    lock = tmp_path / "gpu-0.lock"
    with _python(SHARED_HOLDER, str(lock), "2", stdout=subprocess.PIPE) as other:
        assert other.stdout is not None and other.stdout.readline().strip() == "held"
        with DeviceLock(lock) as held, autotune_alone.holding(held):
            tuner = _Sweep(held)
            t0 = time.monotonic()
            assert tuner.sweep("k1", ["c1", "c2"]) is False
            compiled_at = tuner.events[0]
            assert compiled_at == ("compiled", 0) and time.monotonic() - t0 > 1.0
            assert tuner.events[1:] == [("timed c1", 1), ("timed c2", 1)]
            assert held.alone == 1 and held.waited_alone > 1.0
        assert other.wait(timeout=30) == 0


# A test command's own code under the isolated ``python`` (``COMMAND_BOOT``): it says
# whether the lock's variable is left to it and to a child, then, at each line the test
# writes, runs one "autotune" (the hook that wraps Triton's) and finally exits.
COMMAND = """
import os, subprocess, sys
from runner.worker.bench import autotune_alone
name = sys.argv[1]
child = subprocess.run([sys.executable, "-c", "import os, sys; print(os.environ.get(sys.argv[1]))",
                        name], capture_output=True, text=True).stdout.strip()
print(os.environ.get(name), child, flush=True)
tune = autotune_alone.alone_on_device(lambda: None)
for _ in range(2):
    sys.stdin.readline()
    tune()
    print("tuned", flush=True)
sys.stdin.readline()
"""


def _free(path: Path, how: int) -> bool:
    """Whether another process could take ``path``'s lock ``how`` (shared or alone) now."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)
    return True


@contextlib.contextmanager
def _command(
    argv: list[str], env: dict[str, str]
) -> Iterator[tuple[Callable[[], None], Callable[[], str]]]:
    """A command's process, talked to by lines: yields ``say`` (one empty line to it)
    and ``heard`` (its next line); on leaving, it must have exited 0."""
    with subprocess.Popen(
        argv, env=env, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as command:
        stdin, stdout = command.stdin, command.stdout
        assert stdin is not None and stdout is not None

        def say() -> None:
            stdin.write("\n")
            stdin.flush()

        yield say, stdout.readline
        assert command.wait(timeout=30) == 0


def test_a_command_beside_the_workers_holds_the_lock_as_a_worker_and_alone_after_its_first_autotune(
    tmp_path: Path,
) -> None:
    """The isolated ``python`` of a command the host runs beside the workers' start-up
    (upstream's quick script): shared from its start, alone from its first autotune to
    its exit; the variable is its own, not its children's."""
    lock = lock_path(tmp_path / "leases", "0")
    env = {**os.environ, SYSPATH_ENV: ROOT, COMMAND_LOCK_ENV: str(lock)}
    argv = [*isolated_command(sys.executable), "-c", COMMAND, COMMAND_LOCK_ENV]
    with _command(argv, env) as (say, heard):
        assert heard().split() == ["None", "None"]
        assert _free(lock, fcntl.LOCK_SH) and not _free(lock, fcntl.LOCK_EX)
        for _ in range(2):  # the second autotune is inside the first one's hold
            say()
            assert heard().strip() == "tuned"
            assert not _free(lock, fcntl.LOCK_SH)
        say()
    assert _free(lock, fcntl.LOCK_EX)
    # without the variable it holds nothing, and its autotunes call straight through
    del env[COMMAND_LOCK_ENV]
    done = subprocess.run(argv, env=env, text=True, input="\n\n\n", capture_output=True)
    assert done.returncode == 0 and done.stdout.split() == ["None", "None", "tuned", "tuned"]


# A command that imports an autotuner this harness cannot hook (a Triton without
# ``Autotuner._bench``: a stand-in package written by the test), then waits for a line.
UNHOOKABLE = """
import sys
import triton.runtime.autotuner
print("imported", flush=True)
sys.stdin.readline()
"""


def test_a_command_whose_autotuner_cannot_be_hooked_is_alone_from_its_import(
    tmp_path: Path,
) -> None:
    """As a worker that cannot hook its autotuner prepares each shape alone, a command
    run beside the workers whose autotuner cannot be hooked holds the device alone from
    its import of Triton's autotuner to its exit."""
    lock = lock_path(tmp_path / "leases", "0")
    runtime = tmp_path / "site" / "triton" / "runtime"
    runtime.mkdir(parents=True)
    (runtime.parent / "__init__.py").write_text("", encoding="utf-8")
    (runtime / "__init__.py").write_text("", encoding="utf-8")
    (runtime / "autotuner.py").write_text("class Autotuner:\n    pass\n", encoding="utf-8")
    paths = os.pathsep.join([ROOT, str(tmp_path / "site")])
    env = {**os.environ, SYSPATH_ENV: paths, COMMAND_LOCK_ENV: str(lock)}
    argv = [*isolated_command(sys.executable), "-c", UNHOOKABLE]
    with _command(argv, env) as (say, heard):
        assert heard().strip() == "imported"
        assert not _free(lock, fcntl.LOCK_SH)
        say()
    assert _free(lock, fcntl.LOCK_EX)


def test_one_lock_file_per_physical_device(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert device_key((3,), {"CUDA_VISIBLE_DEVICES": "5"}) == "3"  # the leased GPU first
    amd = {"ROCR_VISIBLE_DEVICES": "2", "HIP_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "0"}
    assert device_key((), amd) == "2"  # ROCr's index is the physical one
    assert device_key((), {"CUDA_VISIBLE_DEVICES": "GPU-1a2b/c,1"}) == "GPU-1a2b_c"
    assert device_key((), {}) == "0"
    monkeypatch.setenv("CAMPAIGN_LEASE_DIR", str(tmp_path / "leases"))
    job = WorkerJob("pass-01-incumbent", tmp_path / "s.json", tmp_path, tmp_path / "o", gpus=(4,))
    path = Path(prepare_lock_env(job, {})[PREPARE_LOCK_ENV])
    assert path == lock_path(tmp_path / "leases", "4") and path.is_file()
    sharded = WorkerJob("w", tmp_path / "s.json", tmp_path, tmp_path / "o")
    assert prepare_lock_env(sharded, {"CUDA_VISIBLE_DEVICES": "4"}) == {PREPARE_LOCK_ENV: str(path)}


@pytest.mark.integration
def test_a_serving_worker_on_the_cpu_takes_no_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runner.cli  # noqa: F401  (newcampaign imported first hits an import cycle)
    from runner.flow.new_campaign import fresh_example_copy

    monkeypatch.setenv("CAMPAIGN_LEASE_DIR", str(tmp_path / "leases"))
    monkeypatch.setenv(READY_TIMEOUT_ENV, "60")
    tree = fresh_example_copy(tmp_path / "tree")
    timing = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=3, budget_s=0.05, batch_s=0.005)
    options = {"backend": "TORCH", "granularity": None}
    template = RoundSpec(
        "lock-test", 2, "incumbent", 0, "full", "example", "gemm", options, (), timing, device="cpu"
    )
    env = {"PYTHONPATH": str(tree), "TURBO_KERNELS_GEMM_BACKEND": "TORCH"}
    host = PlainHost(tmp_path / "round", LocalExecutor(), template, lambda t: env)
    shapes = [Shape("s1", 16, 64, 64)]
    held = lock_path(tmp_path / "leases", "7")
    # a worker that took it would wait out its ready limit
    with DeviceLock(held) as lock, lock.exclusive():
        got = measure_paired(
            host,
            {"incumbent": tree},
            shapes,
            ["incumbent"],
            pairs=1,
            env={"CUDA_VISIBLE_DEVICES": "7"},
        )
    folder = got["incumbent"][0].parent
    log = (folder / "worker.log").read_text()
    assert "preparing without the device's preparation lock on the cpu" in log
    samples = json.loads((folder / "samples.json").read_text())
    assert samples["shapes"]["s1"]["prepare_wait_s"] == 0.0
