"""Progress events of a long command (baseline, validate, accept, reproduce, demo).

Flow code reports through the ``progress`` callable it is given (``Progress``: takes a
``str``).  Every event here *is* a ``str`` (its line of text, as the plain messages
were), so a consumer that prints or collects strings (``print``, ``list.append``, the
MCP server's notifications) keeps working, and one that knows the events (the CLI's
display, ``runner.cli.progress_view``) reads their fields:

* ``StepStarted``: the round started a step (a pass, a build, the records);
* ``AcceptStep``: final acceptance started one of its steps (with the time left);
* ``PairsPlanned``: the pairs (passes, with one role) the measurement plans so far;
* ``TurnDone``: one worker turn of a paired measurement ended;
* ``PairDone``: a process pair finished, with its reading (the candidate's gain over
  the incumbent on that pair's two CSVs) when there is one.

The measuring ones carry the seconds elapsed and an estimate of the seconds left,
from ``PairWatch``: each batch's time is estimated when it is planned, for the first
from the baseline's recorded seconds per shape (``pair_seconds``), for later ones
from the rate measured so far, and counts down; each pair done re-estimates what is
left from every pair not yet done (the next waves' too) at the pace measured.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeVar

if TYPE_CHECKING:
    from typing_extensions import Unpack

Progress = Callable[[str], None]
E = TypeVar("E", bound="Event")

# A paired worker's seconds on a shape in a round, per second the baseline's worker
# spent preparing and timing it (``shape_seconds``): its turns take about that (the
# same budget, split over them), its finish (the fresh step, the re-check) 0.55 more.
# And the start-up of a batch's workers (imports, first calls, side by side).  Both
# measured on the CPU demo (docs/data/progress_estimate_cpu_2026-12-01.md); after the
# first pair the rate measured so far replaces them.
PAIR_SECONDS_FACTOR = 1.55
START_UP_S = 15.0


class EventFields(TypedDict, total=False):
    """The fields an event may carry (each event's docstring says which it has)."""

    name: str
    index: int
    steps: int
    elapsed_s: float
    left_s: float | None
    done: int
    planned: int
    unit: str
    more: int
    cap_s: float | None
    cap_pairs: int
    cap_promising: int
    turns: int
    turns_planned: int
    gain_pct: float | None


class MeasuringFields(TypedDict):
    """The fields every measuring event has (``PairWatch`` fills them)."""

    done: int
    planned: int
    unit: str
    elapsed_s: float
    left_s: float | None


class Event(str):
    """A progress message that is also its line of text: ``"<label>: <text>"``."""

    label: str
    fields: EventFields

    def __new__(cls: type[E], label: str, **fields: Unpack[EventFields]) -> E:
        obj = super().__new__(cls, f"{label}: {cls.describe(fields)}")
        obj.label = label
        obj.fields = fields.copy()
        return obj

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        raise NotImplementedError

    @property
    def text(self) -> str:
        """The line without its label."""
        return self.describe(self.fields)

    def relabel(self: E, label: str) -> E:
        """The same event said by another label (``accept`` for its round)."""
        return type(self)(label, **self.fields)

    def __getattr__(self, name: str) -> object:
        fields = self.__dict__.get("fields", {})
        if name in fields:
            return fields[name]
        raise AttributeError(name)

    def __reduce__(self) -> tuple[object, tuple[type[Event], str, EventFields]]:
        # a str subclass with fields: pickle by its fields
        return (_rebuild, (type(self), self.label, self.fields))


def _rebuild(cls: type[Event], label: str, fields: EventFields) -> Event:
    return cls(label, **fields)


class StepStarted(Event):
    """``name``: the step (``pass-01-baseline``, ``records``, ...)."""

    name: str

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        return str(fields["name"])


class AcceptStep(Event):
    """A step of ``campaign accept`` started: ``name``, ``index`` of ``steps``,
    ``elapsed_s`` since the acceptance began, ``left_s`` (the steps left, this one
    included, from the last acceptance's seconds per step; None: no estimate yet)."""

    name: str
    steps: int
    elapsed_s: float
    left_s: float | None

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        left = fields.get("left_s")
        est = f", about {fmt_seconds(left)} left" if left is not None else ""
        return (
            f"step {fields['index']}/{fields['steps']}: {fields['name']} "
            f"({fmt_seconds(fields['elapsed_s'])} elapsed{est})"
        )


class _Measuring(Event):
    """Fields every measuring event has: ``done``/``planned`` pairs, ``unit``
    ("pair" or "pass"), ``elapsed_s``, ``left_s`` (None: no estimate yet)."""

    done: int
    planned: int
    unit: str
    elapsed_s: float
    left_s: float | None

    @staticmethod
    def clock(fields: EventFields) -> str:
        left = fields.get("left_s")
        est = f", about {fmt_seconds(left)} left" if left is not None else ""
        return f"{fmt_seconds(fields['elapsed_s'])} elapsed{est}"


class PairsPlanned(_Measuring):
    """``more`` pairs planned now (``planned`` in all); the measurement cap
    (``runner.compare.loop.next_pairs``): ``cap_s`` seconds, within which more pairs
    are planned only while they fit, and its pair floors ``cap_pairs`` and
    ``cap_promising`` (pairs that may always be measured, however long they take)."""

    more: int
    cap_s: float | None
    cap_pairs: int
    cap_promising: int

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        unit, more = fields["unit"], fields["more"]
        return (
            f"measuring {more} {unit}(s): {fields['done']}/{fields['planned']} {plural(unit)} "
            f"done, {cls.clock(fields)}{cls.cap(fields)}"
        )

    @staticmethod
    def cap(fields: EventFields) -> str:
        """What the cap holds: when more pairs stop being planned (the pairs planned
        always finish)."""
        cap, floor, promising = fields.get("cap_s"), fields.get("cap_pairs"), None
        if not cap:
            return ""
        unit = plural(fields["unit"])
        text = f"; more {unit} only while they fit in {fmt_seconds(cap)}"
        if floor:
            text += f" or until {floor} {unit} are in"
            promising = fields.get("cap_promising")
        if promising:
            text += f" ({promising} while the gain's interval lies above 1%)"
        return text


class TurnDone(_Measuring):
    """``turns``/``turns_planned``: worker turns ended / planned so far."""

    turns: int
    turns_planned: int

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        return (
            f"turn {fields['turns']}/{fields['turns_planned']} "
            f"({fields['done']}/{fields['planned']} {plural(fields['unit'])} done), "
            f"{cls.clock(fields)}"
        )


class PairDone(_Measuring):
    """``gain_pct``: the candidate's gain on this pair alone (None: one role)."""

    gain_pct: float | None

    @classmethod
    def describe(cls, fields: EventFields) -> str:
        gain = fields.get("gain_pct")
        reading = f": gain {gain:+.2f}% on this pair" if gain is not None else ""
        return (
            f"{fields['unit']} {fields['done']}/{fields['planned']} done{reading}, "
            f"{cls.clock(fields)}"
        )


def plural(unit: str) -> str:
    """``pairs``, ``passes``."""
    return unit + ("es" if unit.endswith("s") else "s")


def fmt_seconds(seconds: float) -> str:
    """``42 s``, ``3 min 05 s``."""
    s = max(0, round(seconds))
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


def pair_seconds(
    shape_seconds: Mapping[str, float], labels: Sequence[str], roles: int
) -> float | None:
    """The seconds one process pair (one worker per role) should take on ``labels``
    from the baseline's seconds per shape; a shape without a record (a quick round's
    unannounced shape) counts as the median recorded one; None when more than one shape
    has none recorded."""
    known = sorted(v for v in shape_seconds.values() if v)
    unknown = [label for label in labels if not shape_seconds.get(label)]
    if not labels or not known or len(unknown) > 1:
        return None
    typical = known[len(known) // 2]
    total = sum(shape_seconds.get(label) or typical for label in labels)
    return roles * PAIR_SECONDS_FACTOR * total


def batch_seconds(
    more: int,
    done: int,
    last_done_s: float | None,
    prior_s: float | None,
    start_ups: Sequence[float] = (),
) -> float | None:
    """The seconds a batch of ``more`` pairs should take.  After a pair: one start-up
    as the batches measured theirs (``start_ups``: from a batch's planning to its first
    turn's end; none, e.g. fresh processes per pass: 0) and ``more`` pairs at the rate
    measured so far (``done`` pairs by ``last_done_s``, less those start-ups).  Before:
    one ``START_UP_S`` and ``prior_s`` a pair.  None without either."""
    if done and last_done_s is not None:
        start_up = sum(start_ups) / len(start_ups) if start_ups else 0.0
        return start_up + more * max(last_done_s - sum(start_ups), 0.0) / done
    if prior_s is not None:
        return START_UP_S + more * prior_s
    return None


def estimate_left(
    planned: int,
    done: int,
    elapsed_s: float,
    *,
    batch_s: float | None,
    batch_elapsed_s: float = 0.0,
    turn_fraction: float = 0.0,
) -> float | None:
    """Seconds left for the ``planned`` pairs at ``elapsed_s``: what is left of the
    current batch's estimate (``batch_seconds``; a batch's pairs finish together at
    its end, so the estimate counts down rather than follows each pair); without one,
    the share of the turns done (``turn_fraction``) extrapolated; else None.  Never
    below 0; 0 when every planned pair is done."""
    if planned - done <= 0:
        return 0.0
    if batch_s is not None:
        return max(0.0, batch_s - batch_elapsed_s)
    if turn_fraction > 0:
        return max(0.0, elapsed_s * (1 - turn_fraction) / turn_fraction)
    return None


class PairWatch:
    """The progress of one comparison's measurement (every batch of pairs the gate
    asks for): counts pairs and turns, estimates the time left, says it.  Thread-safe
    (shards measure in threads).  ``reading(paths)``: a finished pair's gain (%), from
    its CSVs (incumbent first), or None."""

    def __init__(
        self,
        progress: Progress,
        label: str,
        *,
        roles: int,
        turns_per_pair: int,
        prior_s: float | None = None,
        cap_s: float | None = None,
        cap_pairs: int = 0,
        cap_promising: int = 0,
        reading: Callable[[Sequence[Path]], float | None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.progress, self.label, self.prior_s, self.cap_s = progress, label, prior_s, cap_s
        self.cap_pairs, self.cap_promising = cap_pairs, cap_promising
        self.unit = "pair" if roles > 1 else "pass"
        self.turns_per_pair = turns_per_pair
        self.reading, self.clock = reading, clock
        self.started = clock()
        self.planned = self.done = self.turns = 0
        self.last_done_s: float | None = None
        self.batch_s: float | None = None  # the current batch's estimate
        self.batch_started = 0.0
        self.start_ups: list[float] = []  # per batch: planned -> its first turn's end
        self._batch_turned = False
        self._batch_from = (0, 0)  # (turns, pairs done) when the current batch was planned
        self.turn_seconds: list[float] = []
        self._lock = threading.Lock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def left_s(self) -> float | None:
        total_turns = self.planned * self.turns_per_pair
        fraction = self.turns / total_turns if total_turns else 0.0
        elapsed = self.elapsed()
        return estimate_left(
            self.planned,
            self.done,
            elapsed,
            batch_s=self.batch_s,
            batch_elapsed_s=elapsed - self.batch_started,
            turn_fraction=fraction,
        )

    def _from_turns(self, turns_left: int) -> float:
        """Before any pair is done, once turns were timed: the turns left at the
        measured turn time, and each pair's finish at the prior's share scaled as the
        turns came out against it (the machine's load now against the baseline's)."""
        turn_s = sum(self.turn_seconds) / len(self.turn_seconds)
        assert self.prior_s is not None
        prior_turn = self.prior_s / PAIR_SECONDS_FACTOR / self.turns_per_pair
        finish = (PAIR_SECONDS_FACTOR - 1) * self.prior_s / PAIR_SECONDS_FACTOR
        return turns_left * turn_s + self.planned * finish * turn_s / prior_turn

    def _pairs_left_s(self) -> float:
        """After a pair: the seconds every pair not yet done needs, those of the next
        waves included, at this batch's pace.  Pairs of a wave finish together, so the
        pace is per turn (turns are taken one at a time; a burst of pairs leaves it
        as it was): the turns left at the batch's seconds a turn since its workers were
        up.  A pair ends after every turn of its wave, so turns left are a later
        wave's: add its start-up.
        Without turns (fresh processes per pass): the pairs left at the batch's seconds
        a pair."""
        pairs_left = self.planned - self.done
        if pairs_left <= 0:
            return 0.0
        batch_elapsed = self.elapsed() - self.batch_started
        turns, done = self.turns - self._batch_from[0], self.done - self._batch_from[1]
        if turns <= 0:
            return pairs_left * batch_elapsed / max(done, 1)
        start_up = self.start_ups[-1] if self._batch_turned else 0.0
        turns_left = self.planned * self.turns_per_pair - self.turns
        if turns_left <= 0:
            return 0.0  # the last wave's pairs are finishing
        return start_up + turns_left * max(batch_elapsed - start_up, 0.0) / turns

    def _fields(self) -> MeasuringFields:
        return {
            "done": self.done,
            "planned": self.planned,
            "unit": self.unit,
            "elapsed_s": round(self.elapsed(), 1),
            "left_s": self.left_s(),
        }

    def plan(self, more: int) -> None:
        with self._lock:
            self.batch_s = batch_seconds(
                more, self.done, self.last_done_s, self.prior_s, self.start_ups
            )
            self.batch_started = self.elapsed()
            self._batch_turned = False
            self._batch_from = (self.turns, self.done)
            self.planned += more
            event = PairsPlanned(
                self.label,
                more=more,
                cap_s=self.cap_s,
                cap_pairs=self.cap_pairs,
                cap_promising=self.cap_promising,
                **self._fields(),
            )
        self.progress(event)

    def turn_done(self, seconds: float | None = None) -> None:
        """One worker turn ended; ``seconds``: how long it measured for (the worker's
        own figure)."""
        with self._lock:
            self.turns += 1
            if seconds:
                self.turn_seconds.append(float(seconds))
            if not self.done and self.prior_s and self.turn_seconds:  # the batch counts
                left = self._from_turns(self.planned * self.turns_per_pair - self.turns)
                self.batch_s = self.elapsed() - self.batch_started + left  # down from here
            if not self._batch_turned:  # the batch's workers are up and measuring
                self._batch_turned = True
                self.start_ups.append(self.elapsed() - self.batch_started)
            event = TurnDone(
                self.label,
                turns=self.turns,
                turns_planned=self.planned * self.turns_per_pair,
                **self._fields(),
            )
        self.progress(event)

    def pair_done(self, paths: Sequence[Path] = ()) -> None:
        gain = None
        if self.reading is not None and paths:
            try:
                gain = self.reading(paths)
            except (OSError, ValueError, KeyError, ZeroDivisionError):
                gain = None  # a reading is a courtesy: the gate reads the CSVs itself
        with self._lock:
            self.done += 1
            self.last_done_s = self.elapsed()
            self.batch_s = self.last_done_s - self.batch_started + self._pairs_left_s()
            event = PairDone(self.label, gain_pct=gain, **self._fields())
        self.progress(event)
