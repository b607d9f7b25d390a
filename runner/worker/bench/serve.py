"""The long-lived worker of a paired round: ``python -m runner.worker --serve SPEC OUT``.

One process per role and process pair, alive for the round.  It pays the import,
compile/JIT and first calls once, then measures only when the host hands it the
device: the host sends one JSON line per turn on stdin and waits for the reply line on
stdout, and it only ever talks to one worker per device at a time (the token).  So two
processes never run kernels at once, and the host decides the A B B A order.

Messages (one JSON object per line, each a dataclass of ``runner.core.worker_messages``):
after set-up the worker says ``Ready``; the host then sends ``Block`` per turn (every
shape measured once on one member of the buffer pool; the reply carries the wall clock
and, on a GPU, the memory report by which the host sizes its waves of live workers),
``Fresh`` (the fresh-step timing, a timed turn of its own, the pool freed first) and
``Finish`` (the re-check after timing, untimed: the host sends it to every worker of a
wave at once, after every fresh step is timed; the fresh step is timed here when
``Fresh`` was not sent), after which the worker answers ``Finished`` with its CSV rows
and samples as a per-pass worker would write them (per shape the median over its
blocks) and exits 0 (``os._exit``: no exit hook of the measured code runs).  Each
``BlockDone`` carries the turn's per-shape medians, so the host writes the pass's
``benchmark.csv`` and ``samples.json`` itself, from numbers it checked against the
turns (``runner.measure.host_records``).  On any error it answers ``Failed`` and
exits 1.  On a GPU ``Ready`` carries each shape's preparation peak (``ShapePeaks``).

The buffer pool: per shape ``pool`` input sets (seeds ``seed + 101*k``, the same in every
process, so both roles of a block see the same data), each allocated after a spacer of
a different size.  A process's buffers land at other addresses than its partner's and
each block is measured on another member, so where the buffers happen to sit averages
out over blocks and process pairs instead of becoming a fixed offset of one process.

Worker-side: torch, never pydantic.  The protocol runs on a private copy of the
original stdout; file descriptor 1 then points at stderr, so whatever the target
prints cannot corrupt it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import IO, TYPE_CHECKING

from runner.core.artifact_names import META
from runner.core.files import write_json_atomic
from runner.core.prepare_lock import PREPARE_LOCK_ENV, DeviceLock
from runner.core.samples import Samples, ShapeSamples
from runner.core.shapes import Shape
from runner.core.spec import POOL_CPU, POOL_GPU, RoundSpec
from runner.core.worker_messages import (
    Block,
    BlockDone,
    Failed,
    Finished,
    Fresh,
    FreshDone,
    MemoryReport,
    Ready,
    Reply,
    Request,
    parse_request,
    reply_line,
)
from runner.worker.bench import autotune_alone, autotune_compile
from runner.worker.bench.gpu import CaptureSlot, learn_capture
from runner.worker.bench.oom import out_of_memory, release_cached
from runner.worker.bench.timing import Timing

if TYPE_CHECKING:
    import torch

    from runner.worker.bench.integrity import BindingGuard
    from runner.worker.bench.rows import RowBuilder
    from runner.worker.bench.worker_pass import FreshTimes, Loaded
    from runner.worker.ops.base import Case, CheckResult, OpAdapter

log = logging.getLogger("runner.worker")
SPACER_UNIT = 4096  # bytes; spacer k is k * SPACER_UNIT * (1 + member) bytes


def pool_size(spec: RoundSpec, device: str) -> int:
    """Members of the buffer pool (``spec.pool``, else 4 on a GPU and 2 on the CPU)."""
    default = POOL_CPU if device == "cpu" else POOL_GPU
    return max(1, spec.pool if spec.pool is not None else default)


class Channel:
    """The protocol stream: JSON lines on a private copy of the original stdin/stdout."""

    def __init__(self) -> None:
        self.reader: IO[str] = os.fdopen(os.dup(0), "r", encoding="utf-8")
        self.writer: IO[str] = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # prints of the measured code go to the log, not the protocol
        sys.stdout = sys.stderr

    def send(self, reply: Reply) -> None:
        self.writer.write(reply_line(reply) + "\n")
        self.writer.flush()

    def receive(self) -> Request | None:
        line = self.reader.readline()
        return parse_request(line) if line else None


class _ShapeState:
    """One shape's pool of cases, its correctness checks and its per-block timings."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        self.cases: list[Case] = []
        self.spacers: list[torch.Tensor] = []
        self.checks: list[CheckResult] = []
        self.fwd: list[Timing] = []
        self.bwd: list[Timing] = []
        self.error: str | None = None
        self.timed_problems: list[str] = []  # sampled timed outputs that were wrong
        self.fresh: FreshTimes | None = None  # its fresh-step timings (``Server.fresh``)
        self.moved: dict[str, float] = {}  # bytes a forward / backward moves (the CSV's)
        self.seconds = 0.0  # wall time this process spent on the shape (cost for sharding)
        self.waited = 0.0  # seconds it waited for the device alone before preparing it
        # what its pool members' failed graph captures are remembered by, per kind
        self.slots = {k: CaptureSlot(f"{shape.label} {k}") for k in ("forward", "backward")}

    def free_pool(self) -> None:
        """Keep the bytes a case moves (the CSV's), then free the pool before the
        fresh-step measurement."""
        first = self.cases[0]
        self.moved = {"fwd_bytes": first.fwd_bytes, "bwd_bytes": first.bwd_bytes}
        self.cases, self.spacers = [], []


class Server:
    """The state of one serving worker (see the module docstring)."""

    def __init__(
        self,
        spec: RoundSpec,
        out_dir: Path,
        adapter: OpAdapter,
        device: str,
        guard: BindingGuard | None = None,
    ) -> None:
        self.spec = spec
        self.out_dir = out_dir
        self.adapter = adapter
        self.device = device
        self.guard = guard  # runner.worker.bench.integrity.BindingGuard: verified around each block
        self.pool = pool_size(spec, device)
        self.states = [_ShapeState(s) for s in spec.shapes]
        self.peaks = ShapePeaks(device)
        # the device's preparation lock, named by the host; never on the CPU, where
        # workers do not share a device's timings and must not wait for each other
        lock = os.environ.get(PREPARE_LOCK_ENV, "").strip()
        self.lock = lock if lock and device != "cpu" else None

    def prepare(self) -> None:
        """Checks, the buffer pool and the first calls (JIT, autotune) of every shape;
        on a GPU each shape's measured peak (``ShapePeaks``).  On a GPU each shape is
        prepared under the device's preparation lock (``runner.core.prepare_lock``):
        shared with the other workers of the round, and alone while Triton autotunes
        (``runner.worker.bench.autotune_alone``), so that an autotune times its configs
        while no other worker runs kernels there, each sweep's configs compiled side by
        side before the first is timed (``runner.worker.bench.autotune_compile``); a
        worker whose autotuner cannot be hooked prepares each shape alone.  The waits are
        logged and kept in the shape's samples, not counted in its seconds."""
        if self.lock is None:
            why = "on the cpu" if self.device == "cpu" else f"(no {PREPARE_LOCK_ENV})"
            log.info("preparing without the device's preparation lock %s", why)
            for st in self.states:
                self._prepare_shape(st)
                self._prepared(st)
            return
        unhooked = autotune_alone.install()
        one_by_one = autotune_compile.install()
        if one_by_one:
            log.info("autotune sweeps compile their configs one by one: %s", one_by_one)
        with DeviceLock(self.lock) as lock, autotune_alone.holding(lock):
            if unhooked:
                log.info(
                    "preparing each shape alone on the device (%s): lock %s", unhooked, self.lock
                )
            else:
                log.info("preparing beside the other workers, autotuning alone: lock %s", self.lock)
            for st in self.states:
                before = lock.waited_alone
                with lock.exclusive() if unhooked else lock.shared() as waited:
                    self._prepare_shape(st)
                autotuned = lock.waited_alone - before if not unhooked else 0.0
                st.seconds -= autotuned  # its seconds are its own work, not the waits
                st.waited = waited + autotuned
                self._prepared(st)
            if not unhooked:
                log.info(
                    "autotuned alone %d times, %.1f s waiting for the device",
                    lock.alone,
                    lock.waited_alone,
                )

    def _prepared(self, st: _ShapeState) -> None:
        log.info(
            "shape %s prepared in %.1f s after %.1f s waiting for the device",
            st.shape.label,
            st.seconds,
            st.waited,
        )

    def _prepare_shape(self, st: _ShapeState) -> None:
        """One shape's checks, buffer pool and first calls (``prepare``)."""
        import torch

        t0 = time.perf_counter()
        start = self.peaks.open()
        try:
            seeds = [self.spec.seed + 1000 * i for i in range(self.spec.check_seeds)]
            st.checks = [self.adapter.check(st.shape, self.device, s) for s in seeds]
            release_cached(self.device)  # the checks' float32 references, dropped
            checked = time.perf_counter()
            for k in range(self.pool):
                spacer_bytes = SPACER_UNIT * (1 + k) * (1 + len(st.cases) % 7)
                st.spacers.append(torch.empty(spacer_bytes, dtype=torch.uint8, device=self.device))
                case = self.adapter.case(st.shape, self.device, self.spec.seed + 101 * k)
                case.forward()
                if case.backward:
                    case.backward()
                st.cases.append(case)
            if self.device != "cpu":
                torch.cuda.synchronize()
                self._learn_captures(st)
            log.info(
                "shape %s: checks %.1f s, %d first calls %.1f s",
                st.shape.label,
                checked - t0,
                self.pool,
                time.perf_counter() - checked,
            )
        except Exception as exc:  # a shape that raises still gets a FAIL row
            out_of_memory(exc, st.shape.label, self.out_dir)
            log.error("shape %s raised: %s\n%s", st.shape.label, exc, traceback.format_exc())
            st.error = f"{type(exc).__name__}: {exc}"
            st.cases = []
        self.peaks.close(st.shape.label, start)
        st.seconds += time.perf_counter() - t0

    def _learn_captures(self, st: _ShapeState) -> None:
        """Whether the shape's forward and backward can be captured in a graph, tried on
        its first pool member while preparing (nothing is timed then): a kind that
        cannot goes straight to plain launches in every timed turn, without the capture
        attempt and the side-stream check each turn would spend on it
        (``runner.worker.bench.gpu.learn_capture``)."""
        first = st.cases[0]
        for kind, fn in (("forward", first.forward), ("backward", first.backward)):
            if fn is None:
                continue
            try:
                error = learn_capture(fn, st.slots[kind])
            except Exception as exc:  # nothing learned: its turns try the capture, as before
                log.warning("shape %s: %s capture not tried ahead: %s", st.shape.label, kind, exc)
                continue
            if error:
                log.info(
                    "shape %s: %s is timed with plain launches: %s", st.shape.label, kind, error
                )

    def block(self, pick: int) -> tuple[float, dict[str, tuple[float | None, float | None]]]:
        """One turn: every shape forward and backward on pool member ``pick``.  Returns
        its seconds and, per shape measured, the turn's forward and backward medians
        (what the host is told as the turn ends: ``BlockDone.timings``)."""
        from runner.worker.bench.worker_pass import time_case

        t0 = time.perf_counter()
        told: dict[str, tuple[float | None, float | None]] = {}
        for st in self.states:
            if st.error:
                continue
            case = st.cases[pick % len(st.cases)]
            t1 = time.perf_counter()
            try:
                if self.guard is not None:
                    self.guard.verify()
                fwd, bwd, problems = time_case(case, self.spec, self.device, st.slots)
                if self.guard is not None:
                    self.guard.verify()  # a binding replaced while timing voids the block
                st.fwd.append(fwd)
                if bwd is not None:
                    st.bwd.append(bwd)
                told[st.shape.label] = (fwd.median_ms, bwd.median_ms if bwd else None)
                st.timed_problems += [p for p in problems if p not in st.timed_problems]
            except Exception as exc:
                out_of_memory(exc, st.shape.label, self.out_dir)
                log.error("shape %s raised: %s\n%s", st.shape.label, exc, traceback.format_exc())
                st.error = f"{type(exc).__name__}: {exc}"
            st.seconds += time.perf_counter() - t1
        return time.perf_counter() - t0, told

    def fresh(self) -> None:
        """The finish's timed part, in the worker's exclusive turn: per shape the pool
        freed, then the fresh step timed (``worker_pass.fresh_timing``)."""
        from runner.worker.bench.worker_pass import fresh_timing

        for st in self.states:
            if st.error or not st.fwd or st.fresh is not None:
                continue
            st.free_pool()
            try:
                st.fresh = fresh_timing(self.adapter, st.shape, self.spec, self.device)
            except Exception as exc:
                out_of_memory(exc, st.shape.label, self.out_dir)
                log.error("shape %s raised: %s\n%s", st.shape.label, exc, traceback.format_exc())
                st.error = f"{type(exc).__name__}: {exc}"

    def finish(self) -> Finished:
        """The re-check (with the fresh step's timing first, as a per-pass worker does
        it, when ``fresh`` has not timed it), then the pass's proof files (``meta.json``,
        ``loaded.json``); its CSV rows and samples go to the host in the reply, which
        writes them (the worker writes no number the gate reads)."""
        from runner.core.csv_schema import get_schema
        from runner.worker.bench.environment import environment_meta
        from runner.worker.bench.provenance import record_loaded
        from runner.worker.bench.rows import ROW_BUILDERS, failed_row

        schema = get_schema(self.adapter.info.schema)
        rows: list[dict[str, object]] = []
        raw: dict[str, ShapeSamples] = {}
        for st in self.states:
            try:
                row, record = self._finish_shape(st, ROW_BUILDERS[schema.name])
            except Exception as exc:
                out_of_memory(exc, st.shape.label, self.out_dir)
                log.error("shape %s raised: %s\n%s", st.shape.label, exc, traceback.format_exc())
                st.error = st.error or f"{type(exc).__name__}: {exc}"
                row, record = None, ShapeSamples()
            if row is None:
                rows.append(failed_row(st.shape, schema.name, schema.columns))
                raw[st.shape.label] = {"error": st.error, **record}
                continue
            rows.append(row)
            raw[st.shape.label] = record
        samples: Samples = {"spec": self.spec.to_dict(), "shapes": raw, "pool": self.pool}
        write_json_atomic(self.out_dir / META, environment_meta(self.device).to_dict())
        record_loaded(self.out_dir, self.spec.role, "end")
        return Finished(schema.name, tuple(rows), dict(samples))

    def _finish_shape(
        self, st: _ShapeState, build: RowBuilder
    ) -> tuple[dict[str, object] | None, ShapeSamples]:
        from runner.worker.bench.worker_pass import after_timing

        if st.error or not st.fwd:
            return None, {}
        if st.fresh is None:  # the host did not send "fresh": the whole finish in its turn
            st.free_pool()
        problems, figures, raw = after_timing(
            self.adapter,
            st.shape,
            self.spec,
            self.device,
            st.checks,
            st.timed_problems,
            st.fresh,
        )
        for problem in problems:
            log.error("shape %s failed a check: %s", st.shape.label, problem)
        fwd = over_blocks(st.fwd)
        bwd = over_blocks(st.bwd) if st.bwd else None
        row = build(st.shape, fwd, bwd, st.moved, figures, not problems)
        record: ShapeSamples = {
            "forward": fwd.to_dict(),
            "backward": bwd.to_dict() if bwd else None,
            **raw,
            "seconds": round(st.seconds, 4),
            "prepare_wait_s": round(st.waited, 4),
        }
        return row, record


class ShapePeaks:
    """On a GPU, per shape the most device memory allocated while the worker prepared
    it (its checks, its pool members and their first calls) above what the worker
    held before it: the measured counterpart of the op's figure for one worker with
    this pool (``runner.core.op_info.ShapeMemory.worker``).  Each shape opens its own peak
    window (``torch.cuda.reset_peak_memory_stats``); the most reserved over them is
    kept for the ready report (``reserved``).  On the CPU nothing is measured and
    ``bytes`` stays empty."""

    def __init__(self, device: str) -> None:
        self.gpu = device != "cpu"
        self.reserved = 0
        self.bytes: dict[str, int] = {}

    def open(self) -> int:
        if not self.gpu:
            return 0
        import torch

        torch.cuda.synchronize()
        self.reserved = max(self.reserved, int(torch.cuda.max_memory_reserved()))
        torch.cuda.reset_peak_memory_stats()
        return int(torch.cuda.memory_allocated())

    def close(self, label: str, start: int) -> None:
        if not self.gpu:
            return
        import torch

        torch.cuda.synchronize()
        self.bytes[label] = int(torch.cuda.max_memory_allocated()) - start
        self.reserved = max(self.reserved, int(torch.cuda.max_memory_reserved()))

    def ready(self, labels: tuple[str, ...], memory: MemoryReport) -> Ready:
        """The ready message: ``memory`` with the preparation's peak over every shape's
        window, and ``shape_peaks`` where measured."""
        if not self.gpu:
            return Ready(labels, memory)
        memory = {**memory, "reserved": max(memory.get("reserved", 0), self.reserved)}
        return Ready(labels, memory, dict(self.bytes))


def device_memory(device: str) -> MemoryReport:
    """For the host's wave sizing (``runner.measure.waves.wave_size``), on a GPU (``{}``
    on the CPU): ``reserved``, the most device memory this process reserved since its
    last report (a turn's graphs and work, or its preparation); then the cached blocks
    it no longer uses are handed back to the device, so between its turns a worker
    keeps only what it measures with (``held``); and the device's ``free`` memory now
    and its ``total``.  Every report opens a new peak window."""
    if device == "cpu":
        return {}
    import torch

    reserved = int(torch.cuda.max_memory_reserved())
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    free, total = torch.cuda.mem_get_info()
    held = int(torch.cuda.memory_reserved())
    return {"reserved": reserved, "held": held, "free": int(free), "total": int(total)}


def over_blocks(timings: list[Timing]) -> Timing:
    """One Timing from a process's blocks: one sample per block (its median), so the
    row's time is the median over blocks and its stddev the spread between blocks."""
    first = timings[0]
    return Timing(
        [t.median_ms for t in timings],
        first.method,
        "blocks",
        first.iters_per_sample,
        {"blocks": [t.to_dict() for t in timings]},
    )


def serve(spec: RoundSpec, out_dir: Path, load: Callable[[RoundSpec, Path], Loaded]) -> int:
    """Set up (``load`` gives the op adapter, the device and the binding guard, like
    ``runner.worker.bench.worker_pass.load_for``; it runs after the protocol stream is
    private, so the target's import may print), then answer the host's messages until
    ``finish`` (or end of input)."""
    channel = Channel()
    try:
        adapter, device, guard = load(spec, out_dir)
        log.info("loaded the target on %s", device)
        server = Server(spec, out_dir, adapter, device, guard)
        server.prepare()
        log.info("ready")
        memory = device_memory(server.device)  # its preparation's peak, what it keeps
        channel.send(server.peaks.ready(tuple(s.label for s in spec.shapes), memory))
        while True:
            message = channel.receive()
            if message is None:
                log.error("the host closed the channel before finish")
                return 1
            if isinstance(message, Block):
                start = time.time()
                seconds, told = server.block(message.pick)
                memory = device_memory(server.device)
                end = time.time()
                channel.send(BlockDone(message.index, seconds, start, end, memory, told))
            elif isinstance(message, Fresh):
                log.info("fresh step: timing")
                server.fresh()
                log.info("fresh step: timed")
                memory = device_memory(server.device)  # the pool and the steps handed back
                channel.send(FreshDone(memory))
            else:
                log.info("finishing: the re-checks and files")
                channel.send(server.finish())
                return 0
    except Exception as exc:
        log.error("serve failed: %s\n%s", exc, traceback.format_exc())
        channel.send(Failed(f"{type(exc).__name__}: {exc}"))
        return 1
