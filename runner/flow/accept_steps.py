"""Where the time of ``campaign accept`` goes: each step timed, announced with the time
left (``AcceptStep``), and recorded in ``acceptance.json`` (``step_seconds``), which the
next acceptance of the campaign reads for its estimate."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from runner.measure.progress import AcceptStep, Progress

ACCEPT_STEPS = ("worktrees and builds", "full validation", "full benchmark", "full test suite")
INTEGRATION = "integration"


def prior_seconds(acceptance_json: Path) -> dict[str, float]:
    """The seconds per step an earlier acceptance recorded ({} without one)."""
    try:
        doc = json.loads(acceptance_json.read_text(encoding="utf-8"))
        steps = doc.get("step_seconds") or {}
        return {str(k): float(v) for k, v in steps.items() if isinstance(v, int | float)}
    except (OSError, ValueError, AttributeError):
        return {}


class StepClock:
    """Times the steps of one acceptance (``step``) into ``seconds``."""

    def __init__(
        self, progress: Progress, label: str, steps: tuple[str, ...], prior: Mapping[str, float]
    ) -> None:
        self.progress = progress
        self.label = label
        self.steps = steps
        self.prior = dict(prior)
        self.seconds: dict[str, float] = {}
        self.started = time.monotonic()

    def left(self, name: str) -> float | None:
        """The seconds the steps from ``name`` on took last time; None if one is
        unknown."""
        rest = self.steps[self.steps.index(name) :]
        if not all(n in self.prior for n in rest):
            return None
        return sum(self.prior[n] for n in rest)

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        self.progress(
            AcceptStep(
                self.label,
                name=name,
                index=self.steps.index(name) + 1,
                steps=len(self.steps),
                elapsed_s=time.monotonic() - self.started,
                left_s=self.left(name),
            )
        )
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.seconds[name] = round(time.monotonic() - t0, 1)
