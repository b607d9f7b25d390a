"""Work that runs beside a measurement's workers, handed to the engine as one value.

A flow that measures may have work running while its serving workers start up (a
focused test, a tournament's tests), checks that must pass once the workers have
imported their code (the tamper check's proof) and work that must give the device up
whenever something is timed (acceptance's full suite).  The flow builds one
``BesideWork`` from them and passes it to the measurement (``runner.compare.loop``,
``runner.measure.paired.measure_paired``); the engine never reads them from its host,
so no flow writes into the round to reach the engine.

Host-side and worker-safe: no pydantic, no torch.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass

Quiet = Callable[[], AbstractContextManager[None]]


@dataclass(frozen=True)
class BesideWork:
    """What the engine owes the work beside its workers.

    ``waits``: before the first timed turn of every wave, each is called in order; it
    returns when its work is done and raises when that work failed (the round's focused
    test).  ``ready_checks``: called after them, once the workers have imported their
    code (the tamper check's ``prove_ready``).  ``quiets``: held around every timed
    stretch, a wave's turns and its fresh steps (the full suite's pause).  ``a + b``
    holds both, ``a``'s first."""

    waits: tuple[Callable[[], None], ...] = ()
    ready_checks: tuple[Callable[[], None], ...] = ()
    quiets: tuple[Quiet, ...] = ()

    def __add__(self, other: BesideWork) -> BesideWork:
        return BesideWork(
            self.waits + other.waits,
            self.ready_checks + other.ready_checks,
            self.quiets + other.quiets,
        )

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        """Every ``quiets`` entry held, in order (nothing when there is none)."""
        with contextlib.ExitStack() as stack:
            for enter in self.quiets:
                stack.enter_context(enter())
            yield


NOTHING_BESIDE = BesideWork()
