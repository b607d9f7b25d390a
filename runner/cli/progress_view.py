"""The one place the CLI shows a long command's progress (baseline, validate, accept,
reproduce, demo), on stderr.

It is the ``progress`` callable the flows report to (``runner.measure.progress``):

* on a terminal, a live status line (rich): the step, pairs done out of planned, the
  turn, the time elapsed, the estimate left, the last pair's reading; the steps, the
  pairs planned and each pair's reading also print above it as they land;
* elsewhere (CI logs, a pipe): the same as plain lines, each with the time of day
  (``  .. 13:45:02 round-2: pair 1/2 done: ...``); of the turns only each batch's
  first (its estimate is the first from timed turns);
* ``--quiet``: nothing.

Use it as a context manager around the command, so the live line is cleared at the
end however the command ends.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click
from rich.console import Console, Group
from rich.live import Live
from rich.spinner import Spinner
from rich.table import Table
from rich.text import Text

from runner.measure.progress import (
    AcceptStep,
    PairDone,
    PairsPlanned,
    StepStarted,
    TurnDone,
    fmt_seconds,
    plural,
)

quiet_option = click.option(
    "-q", "--quiet", is_flag=True, help="No progress display (the result still prints)."
)


class ProgressView:
    """``view(message)`` shows one progress message (an event or a plain string)."""

    def __init__(
        self,
        *,
        quiet: bool = False,
        console: Console | None = None,
        clock: Callable[[], float] = time.monotonic,
        stamp: Callable[[], str] = lambda: time.strftime("%H:%M:%S"),
    ) -> None:
        self.quiet = quiet
        self.console = console or Console(stderr=True, highlight=False)
        self.live_mode = not quiet and self.console.is_terminal
        self.clock, self.stamp = clock, stamp
        self.started = clock()
        self.step: str = ""
        self.measuring: PairsPlanned | TurnDone | PairDone | None = None
        self.measuring_at = 0.0
        self.turn: str = ""
        self.reading: str = ""
        self._live: Live | None = None
        self._spinner = Spinner("dots")

    # ---- the progress callable -------------------------------------------------------
    def __call__(self, message: str) -> None:
        if self.quiet:
            return
        first_turn = isinstance(message, TurnDone) and not isinstance(self.measuring, TurnDone)
        self._note(message)
        if self.live_mode:
            self._show_live(message)
        elif first_turn or not isinstance(message, TurnDone):
            self.console.print(f"  .. {self.stamp()} {message}", markup=False, soft_wrap=True)

    def _note(self, message: str) -> None:
        if isinstance(message, StepStarted):
            self.step = f"{message.label}: {message.name}"
            m = self.measuring
            if m is not None and m.done >= m.planned:  # a step after the measurement:
                self.measuring, self.turn, self.reading = None, "", ""  # its figures are done
        elif isinstance(message, AcceptStep):  # a new step: the last one's pairs are done
            self.step, self.measuring, self.turn = str(message), None, ""
        elif isinstance(message, PairsPlanned | TurnDone | PairDone):
            self.measuring, self.measuring_at = message, self.clock()
            if isinstance(message, TurnDone):
                self.turn = f"turn {message.turns}/{message.turns_planned}"
            if isinstance(message, PairDone) and message.gain_pct is not None:
                self.reading = f"last pair {message.gain_pct:+.2f}%"
        elif not self.step:
            self.step = str(message)

    def _show_live(self, message: str) -> None:
        if self._live is None:
            self._live = Live(
                _Line(self), console=self.console, refresh_per_second=4, transient=True
            )
            self._live.start()
        if not isinstance(message, TurnDone):
            self._live.console.print(f"  .. {message}", markup=False, soft_wrap=True)
        self._live.refresh()

    # ---- the live line ---------------------------------------------------------------
    def status_text(self) -> str:
        """The live line's words: step, pairs, turn, elapsed, estimate, reading."""
        parts = [self.step or "starting"]
        m = self.measuring
        if m is not None:
            parts.append(f"{plural(m.unit)} {m.done}/{m.planned}")
            if self.turn:
                parts.append(self.turn)
        parts.append(f"{fmt_seconds(self.clock() - self.started)} elapsed")
        if m is not None and m.left_s is not None:
            left = m.left_s - (self.clock() - self.measuring_at)
            parts.append(f"about {fmt_seconds(left)} left" if left > 0 else "finishing")
        if self.reading:
            parts.append(self.reading)
        return " · ".join(parts)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def __enter__(self) -> ProgressView:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Line:
    """The live renderable: re-read at every refresh, so elapsed time ticks."""

    def __init__(self, view: ProgressView) -> None:
        self.view = view

    def __rich__(self) -> Group:
        grid = Table.grid(padding=(0, 1))
        grid.add_row(self.view._spinner, Text(self.view.status_text(), overflow="ellipsis"))
        return Group(grid)
