"""The wall time of each step of a round, acceptance or baseline (``StepTimes``).

A flow makes one ``StepTimes`` when it starts and hands it down (``RoundPlan.times``, the
measuring engine's ``Host.times``); each step runs inside ``times.step(name)``.  Every
step is kept as its start and end, in seconds from the recorder's start, so that steps
that ran at the same time (a focused test beside the workers' start-up, the kernel
facts' compile beside the whole measurement) show their overlap instead of adding up
as if one after the other.  A step run in another thread says so (``beside``).

The record goes into the round's ``result.json`` (``RoundResult.step_times``), the
acceptance record and ``campaign status --json``; ``benchmarks/step_table.py`` turns a
campaign's records into a table per step.  Shared by both sides: standard library only.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict, cast


class _StepTimeKeys(TypedDict):
    name: str
    start_s: float
    end_s: float


class StepTimeDict(_StepTimeKeys, total=False):
    """``StepTime.to_dict``: ``beside`` only for a step run beside the flow."""

    beside: str


class StepTimesDict(TypedDict):
    """``StepTimes.to_dict``."""

    wall_s: float
    started_at: float
    steps: list[StepTimeDict]


@dataclass(frozen=True)
class StepTime:
    """One step: its name, its start and end (seconds from the recorder's start), and
    what it ran beside ("" for the flow's own thread)."""

    name: str
    start_s: float
    end_s: float
    beside: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.end_s - self.start_s)

    def to_dict(self) -> StepTimeDict:
        out: StepTimeDict = {
            "name": self.name,
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
        }
        if self.beside:
            out["beside"] = self.beside
        return out

    @classmethod
    def from_dict(cls, d: StepTimeDict) -> StepTime:
        return cls(
            name=str(d["name"]),
            start_s=float(d["start_s"]),
            end_s=float(d["end_s"]),
            beside=str(d.get("beside", "")),
        )


@dataclass
class StepTimes:
    """The steps of one round (or acceptance, or baseline) as they ran.  Thread-safe:
    work beside the workers' start-up records from its own thread."""

    steps: list[StepTime] = field(default_factory=list)
    wall_s: float = 0.0  # the whole, as of the last ``finish``
    started_at: float = field(default_factory=time.time)  # epoch seconds
    _origin: float = field(default_factory=time.monotonic, repr=False, compare=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def now(self) -> float:
        """Seconds since the recorder started."""
        return time.monotonic() - self._origin

    @contextlib.contextmanager
    def step(self, name: str, beside: str = "") -> Iterator[None]:
        """Record the time spent inside as step ``name`` (also when it raises)."""
        start = self.now()
        try:
            yield
        finally:
            self.add(StepTime(name, start, self.now(), beside))

    def add(self, step: StepTime) -> None:
        with self._lock:
            self.steps.append(step)

    def finish(self) -> StepTimes:
        """The record as of now, its wall time set: a copy, later steps not in it."""
        with self._lock:
            return StepTimes(list(self.steps), self.now(), self.started_at)

    def largest(self, n: int = 3) -> list[tuple[str, float]]:
        """The ``n`` steps (by name, a step's repeats together) that took the most wall
        time, overlap within a name counted once: ``(name, seconds)``."""
        totals = {
            name: union_seconds(s for s in self.steps if s.name == name)
            for name in dict.fromkeys(s.name for s in self.steps)
        }
        return sorted(totals.items(), key=lambda kv: -kv[1])[:n]

    def to_dict(self) -> StepTimesDict:
        return {
            "wall_s": round(self.wall_s, 3),
            "started_at": round(self.started_at, 3),
            "steps": [s.to_dict() for s in self.steps],
        }

    @classmethod
    def from_dict(cls, d: StepTimesDict) -> StepTimes:
        steps = [StepTime.from_dict(s) for s in d.get("steps", []) if isinstance(s, Mapping)]
        return cls(steps, float(d.get("wall_s", 0.0)), float(d.get("started_at", 0.0)))


def union_seconds(steps: Iterator[StepTime] | Sequence[StepTime]) -> float:
    """The wall time the ``steps`` cover together: overlapping spans counted once."""
    spans = sorted((s.start_s, s.end_s) for s in steps)
    total, reach = 0.0, float("-inf")
    for start, end in spans:
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def read_step_times(doc: object) -> StepTimes | None:
    """A record's step times, None where it has none (a record written before)."""
    if not (isinstance(doc, Mapping) and doc.get("steps")):
        return None
    return StepTimes.from_dict(cast("StepTimesDict", doc))  # as read: from_dict checks it
