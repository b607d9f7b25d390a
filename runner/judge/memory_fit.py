"""Whether a shape can be measured on the campaign's device at all: the device bytes a
pair of paired workers (the two roles of a round or of final acceptance, each with a
buffer pool of one member) needs for it (``runner.core.op_info.shape_memory``), against
the device's memory (``runner.judge.peaks.DEVICE_MEMORY``, from the manifest's GPU;
a CPU campaign is not limited).  ``campaign init`` and ``campaign baseline`` refuse a
target shape that does not fit, and the held-out pick takes only shapes that fit.

Host-safe (no torch)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from runner.core.device_memory import ShapeMemory, gib
from runner.core.errors import ConfigError
from runner.core.op_info import shape_memory, worker_bytes
from runner.core.shapes import Shape
from runner.judge.peaks import device_memory_for

WORKER_GROWTH = 1.25  # margin on a worker's figure (an estimate) or a turn's peak
WORKER_CONTEXT_BYTES = 1 << 30  # a worker's device context and allocator slack
FREE_MARGIN = 0.1  # of the device's memory, never planned for
PAIR = 2  # workers alive at once for one shape: base and candidate


def worker_need(op: str, shapes: Sequence[Shape], pool: int) -> int:
    """What one worker measuring ``shapes`` with ``pool`` members is planned at:
    ``WORKER_GROWTH`` times the op's figure (``runner.core.op_info.worker_bytes``) plus
    ``WORKER_CONTEXT_BYTES``.  The one rule of init, baseline, the held-out pick and
    the paired sessions' plan (``runner.measure.waves.plan_memory``)."""
    return int(WORKER_GROWTH * worker_bytes(op, shapes, pool)) + WORKER_CONTEXT_BYTES


def shape_report(
    op: str, shapes: Sequence[Shape], pool: int, measured: Mapping[str, int]
) -> dict[str, ShapeMemory]:
    """Per shape the op's figure for one worker measuring it alone with ``pool``
    members (``estimate``, bytes) and, where a GPU worker measured it, the most it
    allocated preparing that shape (``measured``): one GPU run calibrates the figure.
    On the CPU nothing is measured and ``measured`` is None, never filled in."""
    return {
        s.label: ShapeMemory(
            shape_memory(op, s).worker(pool),
            int(measured[s.label]) if s.label in measured else None,
        )
        for s in shapes
    }


def usable(total: int) -> float:
    """The part of a device's memory planned for (``FREE_MARGIN`` left alone)."""
    return (1.0 - FREE_MARGIN) * total


@dataclass(frozen=True)
class Unfit:
    """A shape a pair of workers cannot hold: what it needs, what the device has."""

    label: str
    need: int
    total: int

    def describe(self) -> str:
        return (
            f"{self.label} needs {gib(self.need)} for a pair of workers "
            f"({gib(self.need // PAIR)} each, {WORKER_GROWTH:g} times the op's figure "
            f"plus context), the device has {gib(self.total)} "
            f"({int(100 * (1 - FREE_MARGIN))}% of it usable)"
        )


def pair_need(op: str, shape: Shape) -> int:
    """Device bytes planned for two workers measuring ``shape`` side by side, each with
    one pool member (``worker_need``)."""
    return PAIR * worker_need(op, [shape], 1)


def unfit_shapes(op: str, shapes: Iterable[Shape], gpu: str) -> list[Unfit]:
    """The shapes of ``shapes`` a pair of workers cannot hold on ``gpu`` (none on the CPU
    or an unknown GPU)."""
    total = device_memory_for(gpu) if gpu != "cpu" else None
    if total is None:
        return []
    room = usable(total)
    return [Unfit(s.label, need, total) for s in shapes if (need := pair_need(op, s)) > room]


def refuse_unfit(op: str, shapes: Sequence[Shape], gpu: str, where: str) -> None:
    """ConfigError (exit 2) naming each target shape that cannot run on ``gpu``."""
    unfit = unfit_shapes(op, shapes, gpu)
    if not unfit:
        return
    listed = "; ".join(u.describe() for u in unfit)
    raise ConfigError(
        f"{where}: {len(unfit)} target shape(s) cannot be measured on {gpu}: {listed}. "
        "Leave them out of the target shapes (--shapes), or run on a device with more memory"
    )
