"""Seconds per test file and per xdist worker, printed at the end of a run.

The per-file figures are what ``tests/conftest.py`` ``FILE_SECONDS`` holds: a file's
setup, call and teardown, its module and session fixtures included (a session
fixture's build counts for the first test that asked for it).  The per-worker figures
are the seconds each xdist worker spent in tests: when one is far above the other, a
long file started too late (its ``FILE_SECONDS`` entry is missing or too low).
``tests/conftest.py`` registers ``FileSeconds`` for every run; ``.ci/run`` thus
prints both tables after the 25 slowest tests.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import PurePosixPath
from typing import Any

import pytest

# files shorter than this run after the listed ones, in name order (conftest): not listed
LISTED_S = 20.0


class FileSeconds:
    """A pytest plugin: sums each test report's duration by file and by worker."""

    def __init__(self, listed_s: float = LISTED_S) -> None:
        self.listed_s = listed_s
        self.files: dict[str, float] = defaultdict(float)
        self.workers: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        name = PurePosixPath(report.nodeid.split("::", 1)[0]).name
        self.files[name] += report.duration
        node: Any = getattr(report, "node", None)  # set by xdist's controller
        worker = node.gateway.id if node is not None else "main"
        self.workers[worker] += report.duration

    def lines(self) -> list[str]:
        """The two tables: files over ``listed_s`` seconds (longest first) and every
        worker's seconds."""
        long = sorted(
            ((s, name) for name, s in self.files.items() if s >= self.listed_s), reverse=True
        )
        out = [f"{name}: {s:.0f}" for s, name in long]
        busy = ", ".join(f"{w} {s:.0f} s" for w, s in sorted(self.workers.items()))
        return [*out, f"seconds in tests per worker: {busy or 'none'}"]

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        terminalreporter.write_sep(
            "=", f"seconds per file over {self.listed_s:g} s (tests/conftest.py FILE_SECONDS)"
        )
        for line in self.lines():
            terminalreporter.write_line(line)
