"""The entries' checks before anything is timed (``runner.flow.validate``): upstream's
quick script on every measurable entry, where the campaign has one (a failure fails
that entry alone), then every entry's focused test, beside the first measurement's
worker start-up where the executor keeps workers alive (a failure vetoes that entry
alone: ``runner.compare.entries.measure_entries`` measures again without it)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from runner.compare.entries import Entry, entry_alone
from runner.core.errors import FocusedTestFailed, MeasurementFailed, Tampered
from runner.core.files import copy_plain_tree
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.measure.paired import supports_paired
from runner.round.context import BesideStartUp, RoundPlan, run_focused_test
from runner.round.upstream_quick import (
    QuickCheck,
    device_lock_env,
    has_upstream_quick,
    run_quick,
)
from runner.store.upstream_quick import VALIDATION_LOG


@contextlib.contextmanager
def upstream_checks(rnd: RoundPlan, entries: Sequence[Entry]) -> Iterator[BesideWork]:
    """Upstream's quick script on the measurable entries, where the campaign has one:
    an entry alone beside its workers' start-up (``quick_beside``), several before any
    worker starts (``quick_checks``: each failure fails its entry alone, and the
    measurement must know its entries when its workers start); yields what the
    measurement owes it."""
    alone = entry_alone(entries)
    if alone is not None and alone.tree is not None:
        with quick_beside(rnd, alone.tree) as quick:
            yield quick
        return
    quick_checks(rnd, entries)
    yield NOTHING_BESIDE


@contextlib.contextmanager
def quick_beside(rnd: RoundPlan, tree: Path) -> Iterator[BesideWork]:
    """Upstream's quick script on the candidate ``tree`` (``QuickCheck``), where the
    campaign has one: yields what the measurement owes it; its failure is raised
    before anything is measured where it ran at once, else by the first timed turn,
    and at the end where nothing was measured (a vetoed round)."""
    if not has_upstream_quick(rnd):  # upstream's own check beside the gate's evidence
        yield NOTHING_BESIDE
        return
    with QuickCheck(rnd, tree) as quick:
        if not quick.beside:
            quick.wait()
        yield quick.beside_work
        quick.wait()


def quick_checks(rnd: RoundPlan, entries: Sequence[Entry]) -> None:
    """Upstream's quick script on every measurable entry before any worker starts (an
    entry alone runs it beside its workers' start-up: ``quick_beside``); one that fails
    fails its entry alone, as it fails a single round, its log and CSV kept in its
    round's artifacts.  On a GPU target the scripts run side by side, each ``python``
    holding the device's lock itself (``device_lock_env``: alone from its first
    autotune to its end), so they take turns on the device and each entry's autotune
    choices, read later by its workers, are timed alone; elsewhere one at a time."""
    checked = [e for e in entries if e.tree is not None and not e.failure]
    if not checked or not has_upstream_quick(rnd):
        return
    env = device_lock_env(rnd)

    def one(entry: Entry) -> None:
        assert entry.tree is not None
        try:
            run_quick(rnd, entry.tree, entry.role, VALIDATION_LOG, env, n=entry.n)
        except MeasurementFailed as exc:
            entry.failure = str(exc)

    parallel = len(checked) if env else 1
    with (
        rnd.times.step("upstream quick checks"),
        ThreadPoolExecutor(parallel, thread_name_prefix="quick") as pool,
    ):
        for future in [pool.submit(one, e) for e in checked]:
            future.result()


def focused_tests(rnd: RoundPlan, entries: Sequence[Entry]) -> None:
    """Every measurable entry's focused test, before anything is timed (a vetoed entry
    still records its test, as a single round does); a failure vetoes that entry alone.
    The tests run side by side, nothing is timed while they run: all at once on a GPU
    target with serving workers, as many as the host has cores elsewhere (a test is
    mostly a Python interpreter importing torch).  Side by side, each test's math
    libraries get its share of the cores (``OMP_NUM_THREADS``): on the H200's 16 cores
    four example tests (CPU tensors, each with torch's 16 threads) took 45-50 s where
    one alone took 14 s."""
    testable = [e for e in entries if e.tree is not None and not e.failure]
    if rnd.gpu_target and supports_paired(rnd.executor):
        parallel = len(testable)
    else:
        parallel = min(len(testable), os.cpu_count() or 1)
    failed = f"focused test failed on the candidate ({rnd.manifest.test_command}):\n"
    threads = max(1, (os.cpu_count() or 1) // parallel) if parallel > 1 else None

    def one(entry: Entry) -> None:
        assert entry.tree is not None
        try:
            ok, tail = run_focused_test(rnd, entry.role, entry.tree, threads, expect=entry.expect)
        except Tampered as exc:  # its own build rewrote its judge files: it fails alone
            entry.failure = str(exc)
            return
        if not ok:
            entry.vetoes.append(failed + tail)

    with ThreadPoolExecutor(max_workers=max(1, parallel), thread_name_prefix="test") as pool:
        for future in [pool.submit(one, e) for e in testable]:
            future.result()


class EntryTests(BesideStartUp):
    """The entries' focused tests (``focused_tests``) for one validation.

    On a GPU target with serving workers they run in a thread beside the first
    measurement's worker start-up (``BesideStartUp``: on the H200 a single round's test
    took 12-26 s and the four tests of a tournament 39 s before any worker started),
    and its ``beside_work`` holds the first timed turn until all are done.  A test
    that failed vetoes its entry (one whose judge files its own build
    rewrote fails it: TAMPERED), and ``require`` then raises FocusedTestFailed before
    anything was timed: ``measure_entries`` measures again without that entry.
    Elsewhere they run at once, before any worker starts, as they always did.  Leave
    through ``close()``, which waits for the thread and clears the hook."""

    def __init__(self, rnd: RoundPlan, entries: Sequence[Entry]) -> None:
        self.entries = list(entries)
        self._vetoes = {e.role: len(e.vetoes) for e in self.entries}
        self._failures = {e.role: e.failure for e in self.entries}
        self._required = False  # the first measurement waited for them already
        # its step as the round's records name it: one entry's test, or the entries'
        name = f"focused-test-{entries[0].role}" if len(entries) == 1 else "focused-tests"
        super().__init__(rnd, name, lambda: focused_tests(rnd, self.entries))
        if not self.beside:
            self.wait()  # run at once: what it raised is raised here, as it always was

    def failed(self) -> list[Entry]:
        """The entries whose focused test failed (a veto added since they started) or
        that failed at it (tampered judge files)."""
        return [
            e
            for e in self.entries
            if len(e.vetoes) > self._vetoes[e.role] or e.failure != self._failures[e.role]
        ]

    def require(self) -> None:
        """Before the first timed turn: wait for the tests; raise FocusedTestFailed when
        one failed (once: the measurement that follows, without those entries, is not
        held)."""
        if self._required:
            return
        self.wait()
        self._required = True
        failed = self.failed()
        if failed:
            names = ", ".join(f"round-{e.n}" for e in failed)
            raise FocusedTestFailed(f"the focused test failed for {names}")

    def close(self) -> None:
        """Wait for the tests, clear the hook, and put each entry's test folder in its
        round's records as a single round's (``test-candidate``: the log, the exit
        code and the seconds), a failed test's too."""
        super().close()
        for e in self.entries:
            test = self.rnd.tmp / f"test-{e.role}"
            if test.is_dir() and self.rnd.tmp in e.dir.parents:  # its records' folder
                copy_plain_tree(test, e.dir / "test-candidate")
