"""The full test suite beside full validation (``campaign accept``, docs/protocol.md §1.4).

Nothing else may use the device while a worker times a turn; the rest of full
validation (workers starting, preparing their shapes, checking them after timing) times
nothing.  On a GPU target with serving workers the suite starts with full validation
(``BesideStartUp``) and, when it is one pytest run, keeps running through every
untimed stretch: the paired engine holds its ``beside_work.quiet`` around every timed stretch
(a wave's turns, the fresh steps; ``runner.measure.paired``) and the full benchmark,
and the suite gives the device up at its next test boundary, its kernels finished and
its cached memory handed back (``runner.worker.bench.suite_yield``, loaded into its pytest).
A suite command that is not one pytest run (a script, several commands) cannot be
paused: it runs beside the first wave's start-up and the first timed turn waits for it
to end, as before; why is recorded.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from runner.core.lifeline import wait_pids_stopped
from runner.core.processes import pid_alive
from runner.core.suite_yield_names import (
    PAUSE,
    PAUSED,
    PLUGIN,
    POLL_S,
    RUNNING,
    SPANS,
    YIELD_ENV,
)
from runner.measure.beside import BesideWork
from runner.round.context import BesideStartUp, RoundPlan
from runner.store.acceptance import FullSuiteInfo

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_SHELL_OPERATORS = (";", "&&", "||", "|", "&", "`", "$(", "\n")


def unpausable(command: str) -> str | None:
    """None when ``command`` is one pytest run (``pytest ...``, ``python -m pytest ...``,
    after ``VAR=value`` words) that the plugin can pause; else why it cannot be."""
    if any(op in command for op in _SHELL_OPERATORS):
        return f"`{command}` is a shell line of several commands, not one pytest run"
    try:
        words = shlex.split(command)
    except ValueError as exc:
        return f"`{command}` does not parse as a command ({exc})"
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    if words[:1] in (["pytest"], ["py.test"]):
        return None
    if (
        len(words) >= 3
        and Path(words[0]).name.startswith("python")
        and words[1:3]
        == [
            "-m",
            "pytest",
        ]
    ):
        return None
    return f"`{command}` is not one pytest run (`pytest ...` or `python -m pytest ...`)"


def _spans(paths: list[Path], name: str) -> list[tuple[str, float, float]]:
    out = []
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                doc = json.loads(line)
                out.append((str(doc.get(name, "")), float(doc["start"]), float(doc["end"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a killed process
    return out


def during_timed_work(suite_folder: Path, tmp: Path) -> tuple[int, list[str]]:
    """The suite's tests logged in ``suite_folder`` (``runner.worker.bench.suite_yield``) and
    those whose span overlaps a timed turn of ``tmp``'s paired sessions
    (``turns*.jsonl``): how many were logged, and the overlapping ones."""
    tests = _spans(sorted(suite_folder.glob(f"{SPANS}*.jsonl")), "test")
    turns = _spans(sorted(tmp.glob("turns*.jsonl")), "worker")
    hits = [
        name
        for name, start, end in tests
        if any(start < t_end and t_start < end for _, t_start, t_end in turns)
    ]
    return len(tests), hits


def _signal(pid: int, sig: signal.Signals) -> bool:
    """``sig`` sent to ``pid``; False when it has ended."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


class SuiteYield:
    """The host's side of ``runner.worker.bench.suite_yield``: ``quiet()`` asks the suite's
    pytest processes to give the device up and returns once each has (or has ended, or
    ``ended()`` says the suite is over), each then stopped whole (SIGSTOP: no thread of
    it runs, not only its tests); leaving it continues them and lets them go on.  Nested and
    concurrent ``quiet()`` (several GPUs' sessions) pause once.  Counts what it did."""

    def __init__(self, folder: Path, ended: Callable[[], bool]) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PAUSE).unlink(missing_ok=True)
        self._ended = ended
        self._lock = threading.Lock()
        self._depth = 0
        self._since = 0.0
        self.pauses = 0
        self.paused_s = 0.0
        self.longest_wait_s = 0.0  # for a running test to end
        self._stopped: list[int] = []  # the pytest processes stopped (SIGSTOP) now

    def env(self) -> dict[str, str]:
        """The suite job's environment: the plugin loaded, the folder named."""
        plugins = [p for p in os.environ.get("PYTEST_PLUGINS", "").split(",") if p]
        return {"PYTEST_PLUGINS": ",".join([*plugins, PLUGIN]), YIELD_ENV: str(self.folder)}

    def _running(self) -> list[int]:
        pids = []
        for path in self.folder.glob(f"{RUNNING}*"):
            try:
                pids.append(int(path.name[len(RUNNING) :]))
            except ValueError:
                continue
        return pids

    def _pause(self) -> None:
        t0 = time.monotonic()
        (self.folder / PAUSE).touch()
        if self._ended():
            return
        while not self._ended():
            waiting = [
                pid
                for pid in self._running()
                if not (self.folder / f"{PAUSED}{pid}").exists() and pid_alive(pid)
            ]
            if not waiting:
                break
            time.sleep(POLL_S)
        self.pauses += 1  # the suite was running when asked
        self.longest_wait_s = max(self.longest_wait_s, time.monotonic() - t0)
        self._since = time.monotonic()
        # at its boundary, then stopped whole: a thread a test left running (a
        # candidate's test is the candidate's code) runs nothing while work is timed
        self._stopped = [pid for pid in self._running() if _signal(pid, signal.SIGSTOP)]
        wait_pids_stopped(self._stopped)  # each thread stops as it next enters the kernel

    def _resume(self) -> None:
        for pid in self._stopped:
            _signal(pid, signal.SIGCONT)
        self._stopped = []
        (self.folder / PAUSE).unlink(missing_ok=True)
        if self._since:
            self.paused_s += time.monotonic() - self._since
        self._since = 0.0

    @contextmanager
    def quiet(self) -> Iterator[None]:
        with self._lock:
            self._depth += 1
            if self._depth == 1:
                try:
                    self._pause()
                except BaseException:
                    self._depth -= 1
                    (self.folder / PAUSE).unlink(missing_ok=True)
                    raise
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0:
                    self._resume()

    def summary(self) -> dict[str, float]:
        return {
            "pauses": self.pauses,
            "paused_s": round(self.paused_s, 1),
            "longest_wait_s": round(self.longest_wait_s, 2),
        }


class SuiteBeside(BesideStartUp):
    """``work(env)`` (the full suite, ``env`` added to its job's) beside full
    validation.  Where ``BesideStartUp`` runs it beside start-up and the suite is one
    pytest run, it yields (``SuiteYield``): ``beside_work.quiet`` pauses it for timed
    work and no turn waits for its end.  Elsewhere it is a ``BesideStartUp`` (``why_not``)."""

    # The suite runs for minutes beside the start-up: held for all of it, the preparation
    # lock would keep every worker's autotune waiting until the suite ends.  So it holds
    # none, and a worker may autotune while a test of the suite runs kernels on its GPU.
    holds_device = False

    def __init__(
        self, rnd: RoundPlan, command: str, folder: Path, work: Callable[[dict[str, str]], None]
    ) -> None:
        self.why_not = unpausable(command) if self.possible(rnd) else None
        self.yielder: SuiteYield | None = None
        if self.possible(rnd) and self.why_not is None:
            self.yielder = SuiteYield(folder, lambda: self.done)
        env = self.yielder.env() if self.yielder is not None else {}
        super().__init__(rnd, "full-suite", lambda: work(env))

    @property
    def beside_work(self) -> BesideWork:
        """Where it yields, the turns do not wait for its end: it is paused around every
        timed stretch instead.  Elsewhere ``BesideStartUp``'s."""
        if self.yielder is None:
            return super().beside_work
        return BesideWork(quiets=(self.yielder.quiet,))

    def record(self) -> FullSuiteInfo:
        """How it ran, for ``acceptance.json`` and the acceptance page: ``ran``, and
        where it yielded what it did (``yielded``) and the tests it logged against the
        timed turns (``tests_logged``, ``during_timed_work``: must be empty)."""
        if self.yielder is None:
            return {"ran": self.ran()}
        logged, hits = during_timed_work(self.yielder.folder, self.rnd.tmp)
        return {
            "ran": self.ran(),
            "yielded": self.yielder.summary(),
            "tests_logged": logged,
            "during_timed_work": hits,
        }

    def ran(self) -> str:
        if self.yielder is not None:
            s = self.yielder.summary()
            return (
                f"beside full validation ({self.seconds} s): it gave the device up "
                f"{s['pauses']} time(s) while work was timed ({s['paused_s']} s in all; "
                f"the longest wait for a running test to end {s['longest_wait_s']} s)"
            )
        if self.beside:
            return (
                f"beside full validation's worker start-up ({self.seconds} s; the first "
                f"timed turn waited for it: {self.why_not})"
            )
        return f"alone ({self.seconds} s)"
