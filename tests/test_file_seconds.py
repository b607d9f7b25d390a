"""The seconds per file and per worker printed at the end of a run (tests/file_seconds.py):
a real pytest run on two xdist workers of two files of known length."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

CONFTEST = """
from file_seconds import FileSeconds

def pytest_configure(config):
    config.pluginmanager.register(FileSeconds(listed_s=0.5), "file-seconds")
"""


def test_a_run_prints_each_long_file_and_each_workers_seconds(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST, encoding="utf-8")
    (tmp_path / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    # a file of two tests (a fixture's seconds count for its file too) and a short one
    (tmp_path / "test_long.py").write_text(
        "import time, pytest\n\n@pytest.fixture(scope='module')\n"
        "def built():\n    time.sleep(0.6)\n\n"
        "def test_one(built):\n    time.sleep(0.3)\n\n"
        "def test_two(built):\n    time.sleep(0.3)\n",
        encoding="utf-8",
    )
    (tmp_path / "test_short.py").write_text("def test_quick():\n    pass\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(HERE)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)  # this run is the suite's kind: xdist's
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-n",
            "2",
            "--dist",
            "loadfile",
            "-p",
            "no:cacheprovider",
            "test_long.py",
            "test_short.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    assert "seconds per file over 0.5 s (tests/conftest.py FILE_SECONDS)" in out
    got = re.search(r"^test_long\.py: (\d+)$", out, re.M)
    assert got and 1 <= int(got.group(1)) <= 60, out  # 1.2 s of sleeps, rounded
    assert "test_short.py:" not in out  # under the threshold: not listed
    workers = re.search(r"^seconds in tests per worker: (.*)$", out, re.M)
    assert workers, out
    per = dict(part.rsplit(" ", 2)[:2] for part in workers.group(1).split(", "))
    assert set(per) == {"gw0", "gw1"}, workers.group(1)
    assert sorted(int(s) for s in per.values())[-1] >= 1  # the worker that ran test_long.py
