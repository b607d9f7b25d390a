"""Paired, turn-taking measurement with long-lived workers (docs/measurement.md).

Per round and GPU: one fresh serving worker (``python -m runner.worker --serve``) per
role and process pair, started together and alive for the round.  Each pays its
import, compile/JIT and first calls once.  Then the host hands the device to one
worker at a time (it sends one message and waits for the reply: the token), so no two
workers ever run kernels at the same time, in blocks of A B B A per pair, pairs in
turn.  Every block runs on another member of the worker's buffer pool, the same member
for both roles of the block; the pool is walked in a per-pair shuffled order, so
buffer placement is varied and averaged like any other noise source.

Blocks of the same two processes share those processes' offsets, so a process pair,
not a block, is the independent sample: each worker writes one pinned CSV (per shape
the median over its blocks) and the pair's two CSVs are one ``PairSample`` for the
gate.  More samples are more pairs (fresh processes), never more blocks.

Host-side, pydantic-free (benchmarks run it on GPU boxes without pydantic).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import select
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from runner.core import interrupts
from runner.core.artifact_names import BENCHMARK_CSV, GRAPH_CRASH, LAUNCH_NOTES, MEMORY_LOG
from runner.core.cgroup import FOREIGN_FLOOR_S, FOREIGN_SHARE
from runner.core.device_memory import MemoryLog, WorkerMemory, oom_error
from runner.core.errors import ConfigError, MeasurementFailed, WorkerCrashed
from runner.core.files import write_json_atomic
from runner.core.lifeline import wait_stopped
from runner.core.shapes import Shape
from runner.core.spec import TimingSettings
from runner.core.worker_messages import (
    Block,
    BlockDone,
    Failed,
    Finish,
    Finished,
    Fresh,
    FreshDone,
    ProtocolError,
    Ready,
    Reply,
    Request,
    parse_reply,
    request_line,
)
from runner.executors.base import LiveWorker, ServingExecutor
from runner.judge.memory_fit import shape_report
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.measure.host import Host
from runner.measure.host_records import (
    RECORDS_DIR,
    TurnTimes,
    check_finished,
    refused,
    write_records,
)
from runner.measure.progress import PairWatch
from runner.measure.sharding import pass_name, refusal
from runner.measure.waves import (
    finish_side_by_side,
    first_wave,
    plan_memory,
    wave_size,
)

R = TypeVar("R", bound=Reply)  # the reply a message is answered with

READY_TIMEOUT_S = 1800.0  # import, checks, compile/JIT and first calls of every shape
TURN_TIMEOUT_S = 900.0  # one block or the finish
# Either limit can be lowered (or raised) for a host or a test suite, in seconds.
READY_TIMEOUT_ENV = "TURBO_CAMPAIGN_READY_TIMEOUT_S"
TURN_TIMEOUT_ENV = "TURBO_CAMPAIGN_TURN_TIMEOUT_S"
BLOCK_WARMUP_FLOOR_S = 0.1  # a turn's warm-up never shorter than this (or the pinned one)
# A quick round's turn on a GPU (``block_timing``): upper bounds per callable and block.
QUICK_TURN: dict[str, float] = {
    "batch_s": 0.02,
    "warmup_s": 0.05,
    "budget_s": 0.16,
    "repeats": 3,
    "max_repeats": 8,
}

# a process's own crash, never a stop from outside (SIGKILL, SIGTERM, SIGINT)
CRASH_SIGNALS = frozenset(
    {signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGILL, signal.SIGFPE}
)


def worker_timeout(env: str, default: float) -> float:
    """A serving worker's answer limit: ``default``, or the seconds ``env`` names."""
    raw = os.environ.get(env, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{env}={raw!r} is not a number of seconds above 0; unset it or fix it")
    return value


def supports_paired(executor: object) -> bool:
    """True when ``executor`` can keep workers alive for a round (local and docker;
    slurm runs one fresh worker per pass)."""
    return isinstance(executor, ServingExecutor)


def block_timing(settings: TimingSettings, turns: int, *, short: bool = False) -> TimingSettings:
    """The timing of one block when a worker has ``turns`` blocks: the pinned warm-up
    and budget are per callable and process, so each block gets its share (at least
    ``repeats`` batches each).  Every turn follows another process's, so its warm-up
    never drops below ``min(warmup_s, BLOCK_WARMUP_FLOOR_S)``: caches and clocks must
    settle again (the GPU engine also waits for its windows to agree; the CPU one
    does not).

    ``short`` (a quick round or the acceptance on a GPU target, ``Host.short_turns``):
    each block is a short turn, at most the ``QUICK_TURN`` figures (graph-replayed
    batches of about 20 ms, as the probe that motivated turn-taking used).  Turn-taking
    removes the drift between blocks, and the gate's independent samples are process
    pairs, so a turn needs only enough batches for a stable median; the pinned timing
    still governs full rounds, the baseline and every CPU round (CPU timing noise needs
    its longer batches).  The fresh step at a worker's finish is timed with the same
    settings."""
    out = settings
    if turns > 1:
        floor = min(settings.warmup_s, BLOCK_WARMUP_FLOOR_S)
        out = replace(
            settings,
            warmup_s=max(settings.warmup_s / turns, floor),
            budget_s=settings.budget_s / turns,
            max_repeats=max(settings.repeats, math.ceil(settings.max_repeats / turns)),
        )
    if not short:
        return out
    return replace(out, **{k: min(getattr(out, k), v) for k, v in QUICK_TURN.items()})


@dataclass
class _Worker:
    live: LiveWorker
    role: str
    index: int

    @property
    def csv(self) -> Path:
        return self.live.out_dir / BENCHMARK_CSV


def _order(roles: Sequence[str], rotate: int = 0) -> tuple[int, ...]:
    """The worker slots of one block group: A B B A for two roles, its palindrome
    A B C C B A for more (every role twice, drift cancels to first order), A for one.
    With more than two roles the ones after the first (a tournament's candidates) are
    rotated by ``rotate`` (the pair's number): pair 0 A B C C B A, pair 1 A C B B C A,
    so over the pairs every candidate takes every position, the one that follows its
    own turn included (a balanced order: no candidate keeps a position's advantage)."""
    n = len(roles)
    if n == 1:
        return (0,)
    rest = list(range(1, n))
    r = rotate % len(rest)
    forward = (0, *rest[r:], *rest[:r])
    return forward + tuple(reversed(forward))


def turns_per_worker(roles: Sequence[str], groups: int) -> int:
    order = _order(roles)
    return groups * order.count(0)


def measure_paired(
    host: Host,
    trees: Mapping[str, Path],
    shapes: Sequence[Shape],
    roles: Sequence[str],
    *,
    pairs: int,
    groups: int = 1,
    start_index: int = 0,
    env: Mapping[str, str] | None = None,
    suffix: str = "",
    seed: int = 0,
    watch: PairWatch | None = None,
    beside: BesideWork = NOTHING_BESIDE,
) -> dict[str, list[Path]]:
    """``pairs`` process pairs (one worker per role each; with one role, ``pairs``
    workers), ``groups`` A B B A block groups per pair, turn by turn on one device,
    the work ``beside`` them honoured (``BesideWork``: waited for, checked, quiet).

    Pairs run in waves that fit in device memory (``wave_size``): the first pair
    starts alone and takes its turns, and what its workers reserved while preparing and
    at their turns, what they hold between turns (reported at ready and with each
    block) and the device's free memory size the waves; the rest of the first wave
    then starts, and a wave finishes before the next one starts (``first_wave``: an
    earlier session's reports on this machine may size the first wave instead).
    A CPU target (``host.gpu_target`` false) starts up to CPU_WAVE_PAIRS pairs at once;
    ``wave_pairs`` in the spec fixes the wave size (a device shared with other work).

    Worker ``index`` numbers continue from ``start_index`` as pass numbers did, and each
    worker's folder is ``<tmp>/pass-NN-<role><suffix>``.  Returns, per role, the pinned
    CSV of each of its workers in pair order (pair i of the incumbent with pair i of
    the candidate).  Raises MeasurementFailed when a worker fails; every worker started
    here has exited when this returns or raises.  Each turn is logged, with the
    worker's own wall-clock start and end (and on a GPU the most device memory it
    reserved in the turn and what it kept after it), in ``<tmp>/turns<suffix>.jsonl``."""
    template = host.template
    turns = turns_per_worker(roles, groups)
    plan = plan_memory(template, host.gpu_target, host.device_bytes, shapes, len(roles), turns)
    session = _Session(
        graphs=_replay_allowed(host, template.timing.graphs),
        host=host,
        trees=trees,
        shapes=shapes,
        roles=roles,
        groups=groups,
        env=env,
        suffix=suffix,
        watch=watch,
        turns=turns,
        members=plan.members,
        picks=_picks(pairs, 2 * groups, plan.members, seed),
        next_index=start_index,
        ready_s=worker_timeout(READY_TIMEOUT_ENV, READY_TIMEOUT_S),
        turn_s=worker_timeout(TURN_TIMEOUT_ENV, TURN_TIMEOUT_S),
        serving=_serving(host, trees, roles),
        beside=beside,
    )
    return _measured_or_again(
        session, pairs, first_wave(host, template, shapes, len(roles), pairs, plan)
    )


def _measured_or_again(session: _Session, pairs: int, wave: int | None) -> dict[str, list[Path]]:
    """``session`` measured; where a worker crashed as a graph replay does, measured
    again with plain launches (``_without_graphs``)."""
    try:
        return _measured(session, pairs, wave)
    except WorkerCrashed as crash:
        return _measured(_without_graphs(session, crash), pairs, wave)


def _replay_allowed(host: Host, graphs: bool) -> bool:
    """Whether a measurement's workers may time by graph replay: as its timing says
    (``graphs``), unless a replay crashed a worker earlier in the same round
    (``_without_graphs`` noted it in ``<tmp>/LAUNCH_NOTES``): the round's later pairs
    are launched as its first were, and the crash costs one worker start-up a round,
    not one a batch of pairs."""
    return graphs and not launch_notes(host.tmp)


def _measured(session: _Session, pairs: int, wave: int | None) -> dict[str, list[Path]]:
    """``pairs`` pairs of ``session`` measured (``_run_waves``), every worker stopped
    after; per role the pinned CSV of each of its workers."""
    try:
        _run_waves(session, pairs, wave)
        _keep_memory(session)
    finally:
        session.stop_all()
    return session.csvs()


def _without_graphs(session: _Session, crash: WorkerCrashed) -> _Session:
    """A session like ``session`` whose workers time with plain launches, never a
    replayed graph: a worker of ``session`` died by a crash signal, as a graph replay
    does on MI350 under ROCm 7.1-7.2 (docs/measurement.md §2.2).  The crashed session's
    worker folders go under ``<tmp>/GRAPH_CRASH`` (none is read as this measurement's),
    and the fallback is noted in ``<tmp>/LAUNCH_NOTES`` for the round's record.  Raises
    ``crash`` where no graph was replayed: a CPU target, cold-cache timing, graphs off."""
    timing = session.host.template.timing
    if not (session.graphs and session.host.gpu_target and timing.cache_mode == "hot"):
        raise crash
    tmp = session.host.tmp
    aside = tmp / GRAPH_CRASH
    aside.mkdir(exist_ok=True)
    for group in session.started:
        for w in group:
            if w.live.out_dir.exists():
                w.live.out_dir.rename(aside / w.live.out_dir.name)
            kept = tmp / RECORDS_DIR / f"{w.live.name}.json"  # an earlier wave's records
            if kept.exists():
                (aside / RECORDS_DIR).mkdir(exist_ok=True)
                kept.rename(aside / RECORDS_DIR / kept.name)
    name = signal.Signals(crash.signal).name
    note = (
        f"graph replay off: {crash.message.splitlines()[0]} ({name}); the pairs were "
        "measured again with plain launches, both roles alike"
    )
    with (tmp / LAUNCH_NOTES).open("a", encoding="utf-8") as out:
        out.write(note + "\n")
    return replace(session, graphs=False, started=[], memory={}, most={}, shape_peaks={}, told={})


def launch_notes(tmp: Path) -> list[str]:
    """What a measurement in ``tmp`` changed about how it launched (``_without_graphs``)."""
    path = tmp / LAUNCH_NOTES
    if not path.is_file():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line]


def _serving(host: Host, trees: Mapping[str, Path], roles: Sequence[str]) -> ServingExecutor:
    """The host's executor, which must keep workers alive, once every role has a tree."""
    executor = host.executor
    if not isinstance(executor, ServingExecutor):
        raise MeasurementFailed(f"executor {executor.name} cannot keep workers alive for a round")
    missing = sorted(set(roles) - set(trees))
    if missing:
        raise MeasurementFailed(f"no source tree for role(s) {missing}")
    return executor


@dataclass
class _Session:
    """What the pairs of one ``measure_paired`` call share: their host, trees, shapes,
    roles and timing, the pool picks, the workers started so far."""

    graphs: bool  # whether its workers may time by graph replay (TimingSettings.graphs)
    host: Host
    trees: Mapping[str, Path]
    shapes: Sequence[Shape]
    roles: Sequence[str]
    groups: int
    env: Mapping[str, str] | None
    suffix: str
    watch: PairWatch | None
    turns: int  # blocks per worker
    members: int  # of each worker's buffer pool
    picks: list[list[int]]
    next_index: int  # the last worker index used
    ready_s: float
    turn_s: float
    serving: ServingExecutor  # host.executor, which keeps workers alive
    beside: BesideWork  # the work beside the workers (runner.measure.beside)
    started: list[list[_Worker]] = field(default_factory=list)
    memory: dict[str, dict[str, int]] = field(default_factory=dict)  # each worker's last
    # each worker's most over the session: prepare, reserved (a turn's peak) and held
    # the largest, free the smallest (``MEMORY_LOG``)
    most: dict[str, dict[str, int]] = field(default_factory=dict)
    # per shape the most a worker measured preparing it (GPU only, ``ShapePeaks``)
    shape_peaks: dict[str, int] = field(default_factory=dict)
    # per worker the turn medians it reported (``runner.measure.host_records``)
    told: dict[str, TurnTimes] = field(default_factory=dict)

    def stop_all(self) -> None:
        """Stop every worker started in the session."""
        for group in self.started:
            for w in group:
                _stop(w)

    def csvs(self) -> dict[str, list[Path]]:
        """Per role, the pinned CSV of each of its workers in pair order."""
        out: dict[str, list[Path]] = {role: [] for role in self.roles}
        for group in self.started:
            for w in group:
                out[w.role].append(w.csv)
        return out

    def note(self, name: str, report: Mapping[str, int]) -> None:
        """``report`` into ``most`` for worker ``name``."""
        seen = self.most.setdefault(name, {})
        for key, value in report.items():
            if key == "free":
                seen[key] = min(value, seen.get(key, value))
            elif key in ("prepare", "reserved", "held", "total"):
                seen[key] = max(value, seen.get(key, value))

    def start_pair(self) -> list[_Worker]:
        """One worker per role, in ``started`` from the first one (so that whatever
        stops the start, every worker already started is stopped)."""
        group: list[_Worker] = []
        self.started.append(group)
        for role in self.roles:
            self.next_index += 1
            name = pass_name(self.next_index, role) + self.suffix
            spec = self.host.template.for_pass(role, self.next_index, list(self.shapes))
            timing = block_timing(spec.timing, self.turns, short=self.host.short_turns)
            timing = replace(timing, graphs=self.graphs and timing.graphs)
            spec = replace(spec, timing=timing, pool=self.members)
            job = self.host.worker_job(name, spec, self.trees[role], self.env)
            with self.host.times.step("worker launch"):
                live = self.serving.start_worker(job)
            group.append(_Worker(live, role, self.next_index))
            interrupts.check()  # one that came during the fork was dropped there
        return group

    def ready(self, wave: Sequence[list[_Worker]]) -> None:
        """Every worker of ``wave`` ready, then the round's holds (``_hold``).  Each
        worker's memory report at ready (none on the CPU) goes into ``memory``, its
        ``reserved`` as ``prepare``."""
        with self.host.times.step("worker start-up"):
            self._all_ready(wave)
        _hold(self.host, self.beside)

    def _all_ready(self, wave: Sequence[list[_Worker]]) -> None:
        for group in wave:
            for w in group:
                ready = _expect(w, self.ready_s, Ready)
                for label, peak in ready.shape_peaks.items():
                    self.shape_peaks[label] = max(int(peak), self.shape_peaks.get(label, 0))
                report = ready.memory
                if report:
                    self.memory[w.live.name] = {**report, "prepare": report["reserved"]}
                    kept = {k: v for k, v in report.items() if k != "reserved"}
                    self.note(w.live.name, {**kept, "prepare": report["reserved"]})

    def take_turns(self, wave: list[list[_Worker]], first: int) -> None:
        """The wave's turns (``_take_turns``); each worker's last report into ``memory``."""
        with self.beside.quiet(), self.host.times.step("turns"):
            turned = _take_turns(
                self.host,
                wave,
                first,
                self.groups,
                self.picks,
                self.suffix,
                self.turn_s,
                self.told,
                self.watch,
            )
        for name, report in turned.items():
            self.memory[name] = {**self.memory.get(name, {}), **report}
            self.note(name, report)

    def finish(self, wave: Sequence[list[_Worker]]) -> None:
        """Every worker of ``wave`` finished and reaped.  Where the device memory allows
        it (``finish_side_by_side``; always on the CPU): the fresh steps timed one
        worker at a time (each a turn of its own, the worker's buffer pool freed first),
        then, if the reports after them still allow it, every re-check at once
        (untimed), else one re-check at a time.  Otherwise each worker's whole finish
        runs alone, and a finished worker exits before the next one starts."""
        workers = [w for group in wave for w in group]
        together = finish_side_by_side([self.memory.get(w.live.name, {}) for w in workers])
        if together:
            # the fresh steps are timed
            with self.beside.quiet(), self.host.times.step("fresh steps"):
                for w in workers:
                    reply, _ = _timed_turn(wave, w, Fresh(), self.turn_s, FreshDone)
                    if reply.memory:  # what it keeps now, its pool handed back
                        self.note(w.live.name, reply.memory)
                        self.memory[w.live.name] = {
                            **self.memory.get(w.live.name, {}),
                            **reply.memory,
                        }
            # the re-checks side by side only if they still fit; else one at a time
            together = finish_side_by_side([self.memory.get(w.live.name, {}) for w in workers])
            for w in workers if together else []:
                _send(w, Finish())
        with self.host.times.step("re-checks and finish" if together else "fresh steps and finish"):
            self._finished(wave, together)

    def _finished(self, wave: Sequence[list[_Worker]], together: bool) -> None:
        """Each worker of ``wave`` finished (its re-checks sent already where
        ``together``, else its fresh step and re-checks now, alone) and reaped."""
        for group in wave:
            for w in group:
                if together:
                    done = _expect(w, self.turn_s, Finished)
                else:  # its fresh step (timed) and its re-checks, alone
                    with self.beside.quiet(), others_stopped(wave, w):
                        _send(w, Finish())
                        done = _expect(w, self.turn_s, Finished)
                _reap(w)
                self.keep(w, done)
            if self.watch is not None:
                self.watch.pair_done([w.csv for w in group])

    def keep(self, w: _Worker, done: Finished) -> None:
        """The exited worker's rows and samples, checked against the turns it reported,
        written by the host (``runner.measure.host_records``)."""
        problems = check_finished(w.live.name, done, self.told.get(w.live.name, TurnTimes()))
        if problems:
            raise refused(problems)
        write_records(self.host.tmp, w.live.name, w.live.out_dir, done)


def _run_waves(session: _Session, pairs: int, size: int | None) -> None:
    """Start, ready, take the turns of and finish ``pairs`` pairs, a wave at a time;
    ``size`` None: the first pair alone first, its peak memory sizes the waves."""
    while len(session.started) < pairs:
        first = len(session.started)
        wave: list[list[_Worker]] = []
        alone = 0  # pairs of the wave that took their turns already
        if size is None:
            wave.append(session.start_pair())
            session.ready(wave)
            session.take_turns(wave, first)
            reports = [session.memory.get(w.live.name, {}) for w in wave[0]]
            size, alone = wave_size(reports, len(session.roles), pairs), 1
        while len(session.started) - first < min(size, pairs - first):
            wave.append(session.start_pair())
        session.ready(wave[alone:])
        session.take_turns(wave[alone:], first + alone)
        session.finish(wave)


def _hold(host: Host, beside: BesideWork) -> None:
    """Before the first timed turn of a wave: whatever ran beside the workers' start-up
    (``beside.waits``) must be done and have passed, and every ready check
    (``beside.ready_checks``: the workers have imported their code now) must pass."""
    if beside.waits:
        with host.times.step("wait for work beside start-up"):
            for wait in beside.waits:
                wait()
    with host.times.step("ready checks"):
        for check in beside.ready_checks:
            check()


def _keep_memory(session: _Session) -> None:
    """The session's memory reports in ``<tmp>/MEMORY_LOG`` (none on the CPU): each
    worker's, and per shape the op's figure for one worker with the session's pool
    (``estimate``) beside the most a worker measured preparing it (``measured``,
    only where measured)."""
    if session.most:
        op = session.host.template.op
        log = MemoryLog(
            host=socket.gethostname(),
            roles=len(session.roles),
            pool=session.members,
            workers={name: WorkerMemory(**most) for name, most in session.most.items()},
            shapes=shape_report(op, session.shapes, session.members, session.shape_peaks),
        )
        path = session.host.tmp / MEMORY_LOG.format(suffix=session.suffix)
        write_json_atomic(path, log.to_dict())


def _take_turns(
    host: Host,
    wave: list[list[_Worker]],
    first: int,
    groups: int,
    picks: list[list[int]],
    suffix: str,
    turn_s: float,
    told: dict[str, TurnTimes],
    watch: PairWatch | None = None,
) -> dict[str, dict[str, int]]:
    """The blocks of the pairs in ``wave`` (pair numbers from ``first``): per group,
    per pair, the roles in palindrome order.  Returns per worker its memory report after
    its last block, with ``reserved`` the most over its blocks (none on the CPU); each
    block's per-shape medians into ``told``."""
    if not wave:
        return {}
    roles = [w.role for w in wave[0]]
    memory: dict[str, dict[str, int]] = {}
    turns_log = host.tmp / f"turns{suffix}.jsonl"
    with turns_log.open("a", encoding="utf-8") as record:
        for g in range(groups):
            for k, group in enumerate(wave):
                p = first + k
                order = _order(roles, p)
                for half, slot in enumerate(order):
                    pick = picks[p][(2 * g + (half >= len(order) // 2)) % len(picks[p])]
                    interrupts.check()
                    block = Block(g, pick)
                    reply, guard = _timed_turn(wave, group[slot], block, turn_s, BlockDone)
                    name = group[slot].live.name
                    told.setdefault(name, TurnTimes()).add(reply)
                    report = reply.memory
                    held: dict[str, int] = {
                        k: report[k] for k in ("reserved", "held") if k in report
                    }
                    if report:  # the most over its turns, the rest as of its last one
                        before = (memory.get(name) or {}).get("reserved") or 0
                        memory[name] = {**report, "reserved": max(report["reserved"], before)}
                    span = {"start": reply.start, "end": reply.end}
                    turn: dict[str, object] = {
                        "worker": name,
                        "pair": p,
                        "group": g,
                        "pick": pick,
                        **span,
                        **held,
                        **guard,
                    }
                    record.write(json.dumps(turn) + "\n")
                    if watch is not None:
                        watch.turn_done(reply.seconds)
    return memory


def _timed_turn(
    wave: Sequence[Sequence[_Worker]], w: _Worker, message: Request, turn_s: float, kind: type[R]
) -> tuple[R, dict[str, object]]:
    """``w``'s timed turn (a block, a fresh step), the others stopped, and the cgroup CPU
    guard's record of it: ``foreign_cpu_s``, the CPU time its cgroup used beyond its
    process tree meanwhile, or None and ``cpu_guard_off``, why the host could read none
    (``LiveWorker.cpu_clock``).  More than ``FOREIGN_SHARE`` of the turn
    (``FOREIGN_FLOOR_S`` at least) fails the round: a process the worker started and
    detached ran beside its timing."""
    clock, off = w.live.cpu_clock()
    with others_stopped(wave, w):
        if clock is not None:
            clock.start()
        began = time.monotonic()
        reply = _talk(w, message, turn_s, kind)
        wall = time.monotonic() - began
        foreign = clock.foreign_seconds() if clock is not None else None
    if foreign is None:
        return reply, {"foreign_cpu_s": None, "cpu_guard_off": off}
    if foreign > max(FOREIGN_FLOOR_S, FOREIGN_SHARE * wall):
        raise MeasurementFailed(
            f"worker {w.live.name}: its cgroup used {foreign:.2f} s of CPU outside its "
            f"process tree during its {wall:.2f} s timed turn (cgroup CPU guard): a "
            "process it started and detached ran beside the timing",
            w.live.log_path,
        )
    return reply, {"foreign_cpu_s": round(foreign, 4)}


@contextlib.contextmanager
def others_stopped(wave: Sequence[Sequence[_Worker]], active: _Worker) -> Iterator[None]:
    """Every other live worker of ``wave`` stopped whole while ``active`` takes a timed
    turn, and continued after (``LiveWorker.pause``: SIGSTOP to a local worker's process
    group, ``docker pause`` of a worker's container): no thread or helper process of one
    role runs during the other role's turn (docs/measurement.md §3)."""
    stopped: list[LiveWorker] = []
    try:
        for group in wave:
            for w in group:
                if w is not active and w.live.pause():
                    stopped.append(w.live)
        # each thread of a stopped process group stops as it next enters the kernel
        wait_stopped({live.proc.pid for live in stopped if live.stoppable and live.proc})
        yield
    finally:
        for live in stopped:
            live.resume()


def _picks(pairs: int, per_pair: int, pool: int, seed: int) -> list[list[int]]:
    """Per pair, the pool member of each half-group: a shuffled walk through the pool
    (seeded: a round is reproducible), every member before any repeats."""
    rng = random.Random(seed)
    out = []
    for _ in range(pairs):
        walk: list[int] = []
        while len(walk) < per_pair:
            members = list(range(pool))
            rng.shuffle(members)
            walk.extend(members)
        out.append(walk[:per_pair])
    return out


def crash_signal(code: int | None) -> int | None:
    """The crash signal (``CRASH_SIGNALS``) a process died by, from its exit status: -N
    from Popen, 128+N from a shell or ``docker run``; None for any other end."""
    if code is None:
        return None
    number = -code if code < 0 else code - 128 if 128 < code < 160 else 0
    return number if number in CRASH_SIGNALS else None


def _fail(w: _Worker, why: str, *, unanswered: bool = False) -> MeasurementFailed:
    code = w.live.returncode
    proc = w.live.proc
    if proc is not None:
        try:  # a worker that reported its error exits right after
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
    oom = oom_error(w.live.out_dir, w.live.name, w.live.log_path)
    if oom is not None:
        return oom
    refused = refusal(w.live.name, w.live.out_dir)
    if refused:  # it checked where its target came from, and stopped
        return MeasurementFailed(refused, w.live.log_path)
    exit_note = f" (exit {code})" if code is not None else ""
    message = f"worker {w.live.name} failed{exit_note}: {why}"
    crashed = crash_signal(code) if unanswered else None
    if crashed is not None:  # no error of its own code: that would have been answered
        return WorkerCrashed(message, w.live.log_path, signal=crashed)
    return MeasurementFailed(message, w.live.log_path)


def _expect(w: _Worker, timeout: float, kind: type[R]) -> R:
    """The worker's next reply, which must be a ``kind``."""
    proc = w.live.proc
    if proc is None or proc.stdout is None:
        raise _fail(w, "did not start")
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        raise _fail(w, f"gave no answer within {timeout:.0f} s")
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise _fail(w, "exited before answering", unanswered=True)
    try:
        reply = parse_reply(line.decode("utf-8", "replace"))
    except ProtocolError:
        raise _fail(w, f"answered garbage: {line[:200]!r}") from None
    if isinstance(reply, Failed):
        raise _fail(w, reply.error)
    if not isinstance(reply, kind):
        raise _fail(w, f"answered {reply} where {kind.__name__} was due")
    return reply


def _talk(w: _Worker, message: Request, timeout: float, kind: type[R]) -> R:
    _send(w, message)
    return _expect(w, timeout, kind)


def _send(w: _Worker, message: Request) -> None:
    proc = w.live.proc
    if proc is None or proc.stdin is None:
        raise _fail(w, "did not start")
    try:
        proc.stdin.write((request_line(message) + "\n").encode())
        proc.stdin.flush()
    except (BrokenPipeError, OSError):
        raise _fail(w, "is gone") from None


def _reap(w: _Worker) -> None:
    proc = w.live.proc
    if proc is None:
        return
    try:
        code = proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        raise _fail(w, "did not exit after finishing") from None
    w.live.release()
    if code != 0:
        raise _fail(w, "did not exit cleanly after finishing")


def _stop(w: _Worker) -> None:
    """End a worker that is still running (a failure elsewhere) and close its pipes."""
    proc = w.live.proc
    if proc is None:
        return
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    w.live.release()
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
