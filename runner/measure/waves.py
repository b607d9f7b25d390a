"""How many pairs of live workers a paired session runs at once (its waves) and how
many buffer-pool members each worker holds, from device memory: the plan from the op's
per-shape figure before any worker starts (``plan_memory``), an earlier session's
reports on this machine (``prior_wave``), the first pair's reports (``wave_size``), and
whether a wave can finish side by side (``finish_side_by_side``).  The figures are
named in ``runner.judge.memory_fit``; the turns themselves are ``runner.measure.paired``.

Host-side and worker-safe: no pydantic, no torch."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runner.core.device_memory import MemoryLog
from runner.core.op_info import shape_memory
from runner.core.shapes import Shape
from runner.core.spec import POOL_CPU, POOL_GPU, RoundSpec
from runner.judge.memory_fit import (
    FREE_MARGIN,
    WORKER_CONTEXT_BYTES,
    WORKER_GROWTH,
    usable,
    worker_need,
)
from runner.measure.host import Host

# Sizing a wave of live workers by device memory (``wave_size``).
CPU_WAVE_PAIRS = 8  # a CPU target's pairs alive at once (host memory; turns are serial)


def finish_side_by_side(memory: Sequence[Mapping[str, int]]) -> bool:
    """Whether the workers of a wave can finish side by side, from their last memory
    reports (``wave_size`` names the figures): every fresh step is timed alone, while
    the others hold what they hold (room for one worker at ``WORKER_GROWTH`` times the
    most it reserved, preparing or at a turn), and then every re-check runs at once,
    each worker growing from what it holds to its preparation's peak (its pool handed
    back, a re-check needs no more than its preparation did).  True without reports
    (the CPU); False when a GPU worker did not report."""
    if not any(memory):
        return True
    if not all(m.get("free") is not None and m.get("held") is not None for m in memory):
        return False
    room = (1.0 - FREE_MARGIN) * min(int(m["free"]) for m in memory)
    one = max(max(int(m.get("prepare") or 0), int(m.get("reserved") or 0)) for m in memory)
    growth = sum(max(0, int(m.get("prepare") or 0) - int(m["held"])) for m in memory)
    return WORKER_GROWTH * one <= room and growth <= room


def cpu_wave(host: Host, pairs: int) -> int | None:
    """A CPU target's wave: up to CPU_WAVE_PAIRS pairs at once (no device memory to share
    out); None on a GPU (the first pair sizes the waves)."""
    return None if host.gpu_target else min(pairs, CPU_WAVE_PAIRS)


def pool_members(pool: int | None, gpu_target: bool, turns: int) -> int:
    """Members of each worker's buffer pool: the spec's ``pool`` (default 4 on a GPU
    target, 2 on the CPU), but never more than the ``turns`` (blocks) a worker
    measures: a member no block picks would only hold device memory, and memory bounds
    how many workers a wave can hold (a GPU worker of a two-role round takes two turns,
    so it held twice the inputs it used).  Placement still varies: each block of a
    worker is on another member, and every worker places its own buffers."""
    default = POOL_GPU if gpu_target else POOL_CPU
    return max(1, min(pool if pool is not None else default, turns))


@dataclass(frozen=True)
class MemoryPlan:
    """A paired session planned from the device bytes its workers need before any
    starts (``runner.core.op_info.worker_bytes``: every shape's pool, the largest shape's
    check on top): ``members`` of each worker's buffer pool, shrunk until one pair
    fits the device; ``fits``, how many pairs the device holds at once (None: not
    known, the CPU or an unknown device; the first pair then sizes the waves)."""

    members: int
    need: int  # one worker's bytes at ``members``
    fits: int | None

    def first_wave(self, pairs: int) -> int | None:
        """The first wave's pairs: all that fit (two or more), else None (the first pair
        alone, its reports size the waves)."""
        if self.fits is None or self.fits < 2:
            return None
        return min(pairs, self.fits)


def plan_memory(
    template: RoundSpec,
    gpu_target: bool,
    total: int | None,
    shapes: Sequence[Shape],
    roles: int,
    turns: int,
) -> MemoryPlan:
    """The session's plan (``MemoryPlan``) from the op's per-shape figure and the
    device's memory ``total`` (None, or a CPU target: not limited).  ``FREE_MARGIN`` of
    the device is left alone; each worker counts ``WORKER_GROWTH`` times its figure (an estimate)
    plus ``WORKER_CONTEXT_BYTES`` (``runner.judge.memory_fit.worker_need``)."""
    members = pool_members(template.pool, gpu_target, turns)
    if not gpu_target or total is None or not shapes:
        return MemoryPlan(members, 0, None)
    room = usable(total)

    def pair(m: int) -> int:
        return max(1, roles) * worker_need(template.op, shapes, m)

    while members > 1 and pair(members) > room:
        members -= 1
    return MemoryPlan(
        members, worker_need(template.op, shapes, members), int(room // pair(members))
    )


def wave_size(memory: Sequence[Mapping[str, int | None]], roles: int, pairs: int) -> int:
    """How many pairs can be alive at once on one device, from the first pair's reports
    (``runner.worker.bench.serve.device_memory``): per worker ``prepare``, the most device
    memory it reserved while it prepared; ``reserved``, the most during one of its
    turns; ``held``, what it keeps between turns (it hands the rest back after each
    report); ``free``, the device's free memory after its last turn, with that pair
    alive.

    A later pair's worker is counted at ``max(prepare, held)`` plus
    ``WORKER_CONTEXT_BYTES``: the wave's new workers prepare side by side, and at the
    finish every worker re-checks side by side with its pool handed back, which needs
    no more than its preparation did.  Turns are one at a time, so only one worker is
    above what it holds: the largest turn peak, times ``WORKER_GROWTH``, is set aside
    once, and so is the first pair's own growth from what it holds to its
    preparation's peak.  ``FREE_MARGIN`` of the free memory is left alone.  A report
    without ``held``/``prepare`` counts its ``reserved`` for both.  No report (the
    CPU): every pair at once."""
    reported = [m for m in memory if m.get("free") is not None and m.get("reserved") is not None]
    if not reported:
        return max(1, pairs)

    def figure(m: Mapping[str, int | None], key: str) -> int:
        value = m.get(key)
        return int(value if value is not None else m["reserved"] or 0)

    peak = max(figure(m, "reserved") for m in reported)
    one = max(max(figure(m, "prepare"), figure(m, "held")) for m in reported)
    growth = sum(max(0, figure(m, "prepare") - figure(m, "held")) for m in reported)
    free = (1.0 - FREE_MARGIN) * min(figure(m, "free") for m in reported)
    room = free - WORKER_GROWTH * peak - growth
    per_pair = (one + WORKER_CONTEXT_BYTES) * max(1, roles)
    return max(1, 1 + int(max(0.0, room) // per_pair))


def first_wave(
    host: Host,
    template: RoundSpec,
    shapes: Sequence[Shape],
    roles: int,
    pairs: int,
    plan: MemoryPlan,
) -> int | None:
    """The first wave's pairs: the spec's ``wave_pairs``, a CPU target's, an earlier
    session's reports on this machine (``prior_wave``) where its workers held as much
    as these will (``prior_covers``), the plan from the op's figure (``plan_memory``),
    else None (the first pair measures alone and sizes the waves)."""
    size = template.wave_pairs or cpu_wave(host, pairs)
    prior = host.memory_prior
    if size is None and prior_covers(prior, template.op, shapes, plan.members):
        size = prior_wave(prior, roles, pairs)
    return size if size is not None else plan.first_wave(pairs)


PRIOR_SLACK = 1.1  # an earlier session's reports size this one's waves up to this growth


def prior_covers(prior: MemoryLog | None, op: str, shapes: Sequence[Shape], members: int) -> bool:
    """Whether an earlier session's reports (``MEMORY_LOG``) can size this session's
    waves: by the op's per-shape figure, one of this session's workers holds at most
    ``PRIOR_SLACK`` times what one of that session's held.  A full-level session after
    quick rounds (every target shape, and the held-out ones at acceptance, against the
    representative few) is planned from the op's figure instead.  A report without
    per-shape figures is taken as it is."""
    if prior is None or not prior.shapes:
        return True
    then = sum(row.estimate for row in prior.shapes.values())
    now = sum(shape_memory(op, s).worker(members) for s in shapes)
    return now <= PRIOR_SLACK * then


def prior_wave(prior: MemoryLog | None, roles: int, pairs: int) -> int | None:
    """The first wave's pairs from an earlier session's reports on this machine
    (``MEMORY_LOG``: per worker the most it reserved preparing and at a turn, the most
    it held between turns, the least free memory it saw), or None (the first pair
    measures alone and sizes the waves, ``wave_size``): no reports, another machine, or
    room for fewer than two pairs.

    The least free memory was read with at least one of that session's pairs alive,
    so the empty device is counted as that plus one pair's holdings (``roles`` of the
    earlier session, each at what it held plus ``WORKER_CONTEXT_BYTES``).  The new
    wave's workers prepare side by side, each counted at ``max(prepare, held)`` plus
    ``WORKER_CONTEXT_BYTES``; the largest turn peak, times ``WORKER_GROWTH``, is set
    aside once; ``FREE_MARGIN`` of the free memory is left alone."""
    if prior is None or prior.host != socket.gethostname():
        return None
    frees: list[int] = []
    peaks: list[int] = []
    helds: list[int] = []
    prepares: list[int] = []
    totals: list[int] = []
    for m in prior.workers.values():
        if m.free is None or m.reserved is None or m.held is None:
            continue  # a row that cannot size a wave
        frees.append(m.free)
        peaks.append(m.reserved)
        helds.append(m.held)
        prepares.append(m.prepare or m.reserved)
        if m.total is not None:
            totals.append(m.total)
    if not frees:
        return None
    held, peak, prepare = max(helds), max(peaks), max(prepares)
    earlier_roles = prior.roles if prior.roles > 0 else 1
    free = min(frees) + earlier_roles * (held + WORKER_CONTEXT_BYTES)
    free = min([free, *totals])
    room = (1.0 - FREE_MARGIN) * free - WORKER_GROWTH * peak
    per_pair = (max(prepare, held) + WORKER_CONTEXT_BYTES) * max(1, roles)
    size = int(max(0.0, room) // per_pair)
    return min(pairs, size) if size >= 2 else None
