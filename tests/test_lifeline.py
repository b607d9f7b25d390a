"""Workers die with their parent (process group + parent-death signal), the pause hook
used by the fault-injection test, and what the next command does with a stale worker
of a killed campaign (named by ``status``, killed by the next command)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from runner.core.pause_points import PAUSE_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV, pause_point
from runner.core.processes import pid_alive
from runner.store.leftovers import (
    JOB_PREFIX,
    OWNER,
    clean_leftovers,
    describe_leftovers,
    partial_files,
)

ROOT = Path(__file__).resolve().parent.parent

PARENT = """
import sys
from runner.core.processes import run
run(["sh", "-c", "echo $$ > " + sys.argv[1] + "; exec sleep 300"],
    die_with_parent=sys.argv[2] == "1", check=False)
"""


def _wait(predicate, seconds: float) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


@pytest.mark.parametrize("die", [True, False])
def test_a_child_dies_with_its_parent(tmp_path: Path, die: bool) -> None:
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent = subprocess.Popen(
        [sys.executable, "-c", PARENT, str(pid_file), "1" if die else "0"], env=env
    )
    assert _wait(lambda: pid_file.exists() and pid_file.read_text().strip(), 60)
    child = int(pid_file.read_text())
    parent.kill()  # SIGKILL: no cleanup code runs in the parent
    parent.wait()
    try:
        gone = _wait(lambda: not pid_alive(child), 5)
        assert gone == die  # without the parent-death signal the child lives on
    finally:
        if pid_alive(child):
            os.kill(child, 9)


def test_pause_point_writes_the_marker_and_waits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "paused"
    monkeypatch.setenv(PAUSE_ENV, "other,here")
    monkeypatch.setenv(PAUSE_FILE_ENV, str(marker))
    monkeypatch.setenv(PAUSE_SECONDS_ENV, "0.3")
    pause_point("elsewhere")
    assert not marker.exists()
    t0 = time.monotonic()
    pause_point("here")
    assert time.monotonic() - t0 >= 0.3
    assert marker.read_text() == f"here {os.getpid()}\n"
    monkeypatch.delenv(PAUSE_ENV)
    marker.unlink()
    pause_point("here")
    assert not marker.exists()


def test_a_stale_worker_is_named_then_killed(tmp_path: Path) -> None:
    """A worker whose campaign process is gone: ``status`` names it, the next command
    kills it and removes the job folder and the partial files."""
    root, name = tmp_path / "campaigns" / "stale", "stale"
    (root / "logs").mkdir(parents=True)
    (root / "logs" / ".optimize.md.abcd1234.tmp").write_text("half")
    dead = subprocess.Popen(["true"])
    dead.wait()
    job = Path(tempfile.mkdtemp(prefix=f"{JOB_PREFIX}{name}-"))
    (job / OWNER).write_text(json.dumps({"root": str(root), "pid": dead.pid}))
    spec = job / "specs" / "pass-01-candidate.json"
    worker = subprocess.Popen(
        ["sh", "-c", "sleep 120; true", "runner.worker", str(spec)], start_new_session=True
    )
    try:
        # a loaded machine: the child may not have exec'd its command line yet
        cmdline = Path(f"/proc/{worker.pid}/cmdline")
        assert _wait(lambda: b"runner.worker" in cmdline.read_bytes(), 30)
        lines = describe_leftovers(root, name, tmp_path / "source")
        text = "\n".join(lines)
        assert f"stale worker: process {worker.pid} (worker pass-01-candidate" in text
        assert f"leftover folder: {job}" in text
        assert "partial file:" in text
        done = clean_leftovers(root, name, tmp_path / "source")
        assert any(f"killed stale process {worker.pid}" in d for d in done)
        worker.wait(timeout=10)
        assert not job.exists()
        assert partial_files(root) == []
        assert describe_leftovers(root, name, tmp_path / "source") == []
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
