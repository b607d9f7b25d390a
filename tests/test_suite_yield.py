"""The full test suite gives the device up while work is timed (docs/protocol.md §1.4):
``runner.worker.bench.suite_yield`` loaded into a real pytest run, ``SuiteYield`` pausing it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from campaign_helpers import slow_suite

import runner
from runner.flow.suite_beside import SuiteYield, during_timed_work, unpausable

ROOT = Path(runner.__file__).resolve().parents[1]


def start_suite(tests: Path, env: dict[str, str]) -> subprocess.Popen[str]:
    full = {**os.environ, **env, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tests)]
    return subprocess.Popen(
        command,
        cwd=tests.parent,
        env=full,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.parametrize(
    ("command", "pausable"),
    [
        ("pytest tests/pytorch/ -v", True),  # Primus-Turbo's (runner.targets.primus_turbo)
        ("python -m pytest tests -q", True),  # the example's
        ("HIP_VISIBLE_DEVICES=0 python3 -m pytest tests", True),
        ("bash run_tests.sh", False),
        ("pytest tests/a && pytest tests/b", False),
        ("pytest tests; ./after", False),
        ("python tests/run.py", False),
        ("pytest 'unterminated", False),
    ],
)
def test_only_one_pytest_run_is_paused(command: str, pausable: bool) -> None:
    why = unpausable(command)
    assert (why is None) is pausable
    if why is not None:
        assert command in why


def test_a_real_pytest_run_runs_no_test_while_the_device_is_asked_for(tmp_path: Path) -> None:
    """Tests of 0.1 s each; the host asks for the device twice while they run: no test's
    span overlaps either window, tests ran before, between and after them, and every
    test ran once."""
    tests = slow_suite(tmp_path, 40, 0.1)
    proc: subprocess.Popen[str] | None = None
    yielder = SuiteYield(tmp_path / "yield", lambda: proc is not None and proc.poll() is not None)
    proc = start_suite(tests, yielder.env())
    deadline = time.monotonic() + 60
    while not list(yielder.folder.glob("running-*")):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
        time.sleep(0.02)
    windows = []
    for _ in range(2):
        time.sleep(0.6)
        with yielder.quiet():
            inside = time.time()
            time.sleep(0.8)  # "a timed turn"
            windows.append((inside, time.time()))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    assert "40 passed" in out
    logs = yielder.folder.glob("tests-*.jsonl")
    spans = [line for p in logs for line in p.read_text().splitlines()]
    assert len(spans) == 40
    turns = tmp_path / "turns.jsonl"
    turns.write_text("".join(f'{{"worker": "w", "start": {a}, "end": {b}}}\n' for a, b in windows))
    logged, hits = during_timed_work(yielder.folder, tmp_path)
    assert (logged, hits) == (40, [])
    starts = sorted(json.loads(line)["start"] for line in spans)
    first, second = windows
    assert starts[0] < first[0]
    assert any(first[1] < s < second[0] for s in starts)
    assert starts[-1] > second[1]
    summary = yielder.summary()
    assert summary["pauses"] == 2 and summary["paused_s"] >= 1.6
    assert summary["longest_wait_s"] < 5  # a 0.1-s test ended; not the whole suite
    assert not list(yielder.folder.glob("running-*"))  # pytest unmarked itself at its end


def test_a_window_asked_for_concurrently_pauses_once(tmp_path: Path) -> None:
    """Two GPUs' sessions hold ``quiet`` at once: one pause, the suite goes on only
    when both are out."""
    tests = slow_suite(tmp_path, 30, 0.05)
    proc: subprocess.Popen[str] | None = None
    yielder = SuiteYield(tmp_path / "yield", lambda: proc is not None and proc.poll() is not None)
    proc = start_suite(tests, yielder.env())
    while not list(yielder.folder.glob("running-*")):
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.02)
    released = threading.Event()

    def other() -> None:
        with yielder.quiet():
            released.wait(10)

    with yielder.quiet():
        thread = threading.Thread(target=other)
        thread.start()
        time.sleep(0.3)
    assert (yielder.folder / "pause").exists()  # the other session still holds it
    released.set()
    thread.join()
    assert not (yielder.folder / "pause").exists()
    proc.communicate(timeout=120)
    assert proc.returncode == 0
    assert yielder.summary()["pauses"] == 1


def test_a_test_that_overlaps_a_turn_is_named(tmp_path: Path) -> None:
    folder = tmp_path / "yield"
    folder.mkdir()
    (folder / "tests-1.jsonl").write_text(
        '{"test": "t::a", "start": 1.0, "end": 2.0}\n{"test": "t::b", "start": 5.0, "end": 6.0}\n'
        '{"test": "t::c", "start": 7'  # cut by a killed process
    )
    (tmp_path / "turns.jsonl").write_text('{"worker": "w", "start": 2.5, "end": 5.5}\n')
    assert during_timed_work(folder, tmp_path) == (2, ["t::b"])


BACKGROUND = """
import threading
import time

def _tick(path):
    while True:
        with open(path, "a") as out:
            out.write(f"{{time.time()}}\\n")
        time.sleep(0.01)

threading.Thread(target=_tick, args=({ticks!r},), daemon=True).start()

def test_step():
    for _ in range(40):
        time.sleep(0.05)

def test_after():
    time.sleep(0.5)
"""


SLOW_COLLECTION = """
import time

def pytest_collection_finish(session):
    time.sleep(1.0)
"""


def test_a_thread_a_test_left_running_runs_nothing_while_the_device_is_asked_for(
    tmp_path: Path,
) -> None:
    """A candidate's test is the candidate's code: a thread its module starts when it is
    imported goes on between tests.  Paused, the whole pytest process is stopped (marked
    running from its first collection on, so a window asked for before its first test
    waits for it too), so the thread's ticks stop for the window and go on after it."""
    ticks = tmp_path / "ticks"
    tests = tmp_path / "test_background.py"
    tests.write_text(BACKGROUND.format(ticks=str(ticks)))
    # the thread starts when the module is imported, in collection; collection then
    # goes on for a second before the first test: the window is asked for in that second
    (tmp_path / "conftest.py").write_text(SLOW_COLLECTION)
    proc: subprocess.Popen[str] | None = None
    yielder = SuiteYield(tmp_path / "yield", lambda: proc is not None and proc.poll() is not None)
    proc = start_suite(tests, yielder.env())
    while not ticks.exists():
        assert proc.poll() is None, proc.communicate()[0]
        time.sleep(0.02)
    with yielder.quiet():  # waits for test_step (2 s) to end, then stops the process
        inside = time.time()
        time.sleep(0.6)
        leaving = time.time()
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, out
    stamps = [float(line) for line in ticks.read_text().split()]
    assert not [t for t in stamps if inside < t < leaving]
    assert any(t < inside for t in stamps) and any(t > leaving for t in stamps)
