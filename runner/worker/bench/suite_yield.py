"""A pytest plugin by which a test suite gives the device up between tests.

``campaign accept`` runs the target's full test suite beside full validation
(``runner.flow.suite_beside``): while a worker times a turn, the suite must not run
anything on the device, and between turns (workers starting, preparing and checking
their shapes: nothing timed) it may.  The suite's pytest loads this module as a plugin
(``PYTEST_PLUGINS``, pytest's own variable for plugins named by module) when
``YIELD_ENV`` names a folder the host and the suite share:

* from the session's first collection on, and before each test module is imported
  and each test runs, the plugin marks its process as running (``running-<pid>``), then,
  while ``pause`` exists in the folder, waits: first every kernel it queued is
  finished and its cached device memory handed back (``torch.cuda.synchronize``,
  ``torch.cuda.empty_cache``, only where its torch has a CUDA context), then
  ``paused-<pid>`` says so, and the test starts when ``pause`` is gone;
* when pytest ends it does the same synchronisation and removes ``running-<pid>``;
* each test's span (wall clock, from the end of its wait to the end of its teardown)
  goes to ``tests-<pid>.jsonl``, which the host compares with the timed turns'
  (``runner.flow.suite_beside.during_timed_work``).

The host (``runner.flow.suite_beside.SuiteYield``) creates ``pause``, then waits until
every running process has said ``paused-<pid>`` (or ended).  Marking before checking on
one side and requesting before listing on the other leaves no test started unseen.
Worker-safe: imports no torch (it reads the one a test imported) and of the harness only
the names it shares with the host (``runner.core.suite_yield_names``, standard library).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from runner.core.suite_yield_names import PAUSE, PAUSED, POLL_S, RUNNING, SPANS, YIELD_ENV

if TYPE_CHECKING:
    import pytest

_started: dict[str, float] = {}  # nodeid -> when it started (after any wait)


def _folder() -> Path | None:
    value = os.environ.get(YIELD_ENV)
    return Path(value) if value else None


def quiesce() -> None:
    """Every kernel this process queued done and its cached blocks released, where a
    test gave its torch a CUDA (or HIP) context; nothing otherwise."""
    torch: ModuleType | None = sys.modules.get("torch")
    if torch is None:
        return
    try:
        if torch.cuda.is_initialized():
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
    except Exception:  # a device a test left broken: that test failed; pause anyway
        pass


def yield_point(folder: Path) -> None:
    """Wait here while the host asks for the device."""
    if not (folder / PAUSE).exists():
        return
    quiesce()
    mark = folder / f"{PAUSED}{os.getpid()}"
    mark.touch()
    try:
        while (folder / PAUSE).exists():
            time.sleep(POLL_S)
    finally:
        mark.unlink(missing_ok=True)


def _boundary() -> bool:
    """Mark this process running, then yield while asked to; False where no folder is
    shared (the plugin is loaded but off)."""
    folder = _folder()
    if folder is None:
        return False
    running = folder / f"{RUNNING}{os.getpid()}"
    if not running.exists():
        running.touch()
    yield_point(folder)
    return True


def pytest_collectstart(collector: pytest.Collector) -> None:
    """Before each collector collects (a test module is imported: the candidate's code,
    which may start work there): a boundary as between tests.  The first one, the
    session's, marks the process before any test module is imported.  An xdist
    controller collects nothing, so it is never marked; its workers are."""
    _boundary()


def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Before each test: a boundary (mark, then yield while asked to)."""
    if _boundary():
        _started[item.nodeid] = time.time()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    """After a test's teardown: its span, appended to this process's log."""
    folder = _folder()
    start = _started.pop(nodeid, None)
    if folder is None or start is None:
        return
    line = json.dumps({"test": nodeid, "start": start, "end": time.time()})
    with open(folder / f"{SPANS}{os.getpid()}.jsonl", "a", encoding="utf-8") as log:
        log.write(line + "\n")


def pytest_unconfigure(config: pytest.Config) -> None:
    """pytest ends: nothing of this process left on the device, then unmark it."""
    folder = _folder()
    if folder is None:
        return
    quiesce()
    (folder / f"{RUNNING}{os.getpid()}").unlink(missing_ok=True)
