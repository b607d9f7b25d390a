"""GPU timing engine behind ``runner.worker.bench.timing.measure`` (docs/measurement.md §2).

``measure_gpu(fn, settings, device)``:

* warms up with the same work it times until the clocks have ramped: at least ``warmup_s``
  and until three successive windows (50 ms, or ``batch_s`` when shorter) agree within 1%
  (capped at max(2 s, 4 * ``warmup_s``)), after one call for JIT/autotune;
* hot mode: device events around batches of back-to-back calls sized to ``batch_s``; the
  batch is a replayed CUDA/HIP graph when the callable can be captured (``graph_replay``),
  else plain launches (``cuda_events``);
* cold mode: before each call a buffer larger than the last-level cache is written
  (outside the timed region) and each call is timed on its own;
* every timed region ends with a full device synchronize, so work left running on a side
  stream is counted (see ``_Region``);
* stops on noise: samples until ``Timing.rsd_of_median <= target_rsd`` or ``budget_s`` runs
  out (``stop_reason`` says which);
* records the clocks and throttle reasons before and after (``runner.worker.bench.clocks``).

Works on ROCm torch too (``torch.cuda`` is HIP there).  Never touches clocks or modes.
"""

from __future__ import annotations

import functools
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from runner.core.spec import TimingSettings
from runner.core.stats import median
from runner.worker.bench.clocks import sample_clocks
from runner.worker.bench.replay_check import check_replay
from runner.worker.bench.thermal import wait_for_headroom
from runner.worker.bench.timing_result import Timing

if TYPE_CHECKING:
    from torch._C import _CudaDeviceProperties
    from torch.cuda import CUDAGraph

WINDOW_S = 0.05  # warm-up window length (``batch_s`` when that is shorter)
WARMUP_AGREE = 0.01  # successive windows agree within this (relative)
WARMUP_WINDOWS = 3  # ... this many of them
WARMUP_CAP_MIN_S = 2.0  # warm-up never runs longer than max(this, 4 * warmup_s)
MAX_ITERS = 100_000  # calls per batch at most
GRAPH_CHUNK = 200  # calls captured in one graph; a batch replays it several times
NO_GRAPHS = "graph replay off for this measurement (a replay crashed a worker): plain launches"
COLD_SAMPLE_FACTOR = 10  # cold mode: each sample is one call, so allow more of them
SIDE_STREAM_SLACK = 1.10  # a region is "hidden work" when the device-wide end is this late
SIDE_STREAM_ABS_MS = 0.005

MIB = 1 << 20
# Callables whose capture failed in this process (the failure's text): later
# measurements of the same callable go straight to plain launches.  Keyed by
# ``capture_key(fn)`` (the callable, or the ``CaptureSlot`` it shares with its shape's
# other pool members), weakly, so a case or a shape that is dropped takes its entry
# with it.
_UNCAPTURABLE: weakref.WeakKeyDictionary[object, str] = weakref.WeakKeyDictionary()
# Last-level cache -> flush buffer (written before each cold call).  Sizes from the vendors'
# datasheets: H100/H200 50-60 MB L2; MI300X/MI325X 256 MB Infinity Cache; MI350X/MI355X
# 256 MB Infinity Cache.  The buffer is about 4x (NVIDIA) / 2x (AMD) the LLC.
FLUSH_BYTES: tuple[tuple[str, int], ...] = (
    ("H200", 256 * MIB),
    ("H100", 256 * MIB),
    ("H800", 256 * MIB),
    ("A100", 256 * MIB),
    ("MI300", 512 * MIB),
    ("MI325", 512 * MIB),
    ("MI350", 512 * MIB),
    ("MI355", 512 * MIB),
    ("GFX942", 512 * MIB),
    ("GFX950", 512 * MIB),
)
DEFAULT_FLUSH_BYTES = 512 * MIB


def flush_bytes_for(name: str, l2_bytes: int = 0) -> int:
    """Bytes to write to evict the last-level cache of the GPU called ``name``."""
    upper = name.upper().replace(" ", "")
    for key, size in FLUSH_BYTES:
        if key in upper:
            return max(size, 4 * l2_bytes)
    return max(DEFAULT_FLUSH_BYTES, 4 * l2_bytes)


def batch_iters(per_call_ms: float, settings: TimingSettings) -> int:
    """Calls per timed batch: ``iters_per_repeat`` if set, else enough to last ``batch_s``."""
    if settings.iters_per_repeat > 0:
        return settings.iters_per_repeat
    if per_call_ms <= 0:
        return MAX_ITERS
    return max(1, min(MAX_ITERS, round(settings.batch_s * 1e3 / per_call_ms)))


def stop_reason(
    samples: list[float], settings: TimingSettings, elapsed_s: float, cap: int
) -> str | None:
    """Why sampling stops now (``converged``/``budget``/``max_repeats``), or None to go on."""
    n = len(samples)
    enough = n >= max(1, settings.repeats)
    if enough and Timing(list(samples), "", "").rsd_of_median <= settings.target_rsd:
        return "converged"
    if n >= cap:
        return "max_repeats"
    if enough and elapsed_s > settings.budget_s:
        return "budget"
    return None


def measure_gpu(fn: Callable[[], object], settings: TimingSettings, device: str) -> Timing:
    """Time ``fn`` on ``device`` ("cuda", "cuda:N"; also HIP devices under ROCm torch)."""
    import torch

    if settings.cache_mode not in ("hot", "cold"):
        raise ValueError(f"cache_mode must be 'hot' or 'cold', got {settings.cache_mode!r}")
    dev = torch.device("cuda" if device in ("gpu", "auto") else device)
    with torch.cuda.device(dev):
        index = torch.cuda.current_device()
        props = torch.cuda.get_device_properties(index)
        thermal = wait_for_headroom(index)  # a hot card would slow this role only
        before = sample_clocks(index)
        region = _Region(torch)
        t0 = time.perf_counter()
        fn()  # JIT compilation, autotuning, library handles
        torch.cuda.synchronize()
        again: Callable[[], object] = fn
        method = "cuda_events"  # how the timed calls ran: plain launches, or a graph
        if settings.cache_mode == "cold":
            warm = _warm_up(_Unit(fn, 1, "cuda_events"), settings, region, t0)
            timing = _measure_cold(fn, settings, region, props)
        else:
            unit = _hot_unit(fn, settings, region)
            warm = _warm_up(unit, settings, region, t0)
            timing = _measure_hot(unit, settings, region, warm.per_call_ms)
            again = unit.run if unit.method == "graph_replay" else fn
            method = unit.method
        # A result made once at capture, or one another process finishes after the call's
        # device work ended, does not follow a negated input: FrozenReplay.
        check_replay(getattr(fn, "replay_probe", None), again, torch.cuda.synchronize, method)
        timing.extra.update(
            {
                "device": props.name,
                "cache_mode": settings.cache_mode,
                "warmup": warm.to_dict(),
                "sync_overhead_ms": region.overhead_ms,
                "side_stream_regions": region.hidden,
                "thermal": thermal.to_dict(),
                "clocks_before": before,
                "clocks_after": sample_clocks(index),
            }
        )
    return timing


@dataclass
class _Unit:
    """What one step of warm-up or of a batch runs: a graph replay of ``calls`` calls, or
    ``calls`` plain calls."""

    run: Callable[[], object]
    calls: int
    method: str  # "graph_replay" | "cuda_events"
    error: str = ""


def capture_key(fn: Callable[[], object]) -> object:
    """What identifies ``fn`` across measurements: a wrapper that is made anew for each
    measurement (``runner.worker.bench.integrity.OutputSampler``) names the callable it wraps,
    or the ``CaptureSlot`` it was given, as its ``capture_key``."""
    return getattr(fn, "capture_key", fn)


def _hot_unit(fn: Callable[[], object], settings: TimingSettings, region: _Region) -> _Unit:
    """Capture a graph of back-to-back calls (about ``batch_s`` long, at most GRAPH_CHUNK
    calls); fall back to plain launches when the callable cannot be captured (or could
    not be before, in this process), and use them when the settings turn graphs off."""
    estimate = region.time(functools.partial(_repeat, fn, 3)) / 3
    chunk = min(batch_iters(estimate, settings), GRAPH_CHUNK)
    if not settings.graphs:
        return _Unit(functools.partial(_repeat, fn, chunk), chunk, "cuda_events", NO_GRAPHS)
    key = capture_key(fn)
    failed_before = _remembered_failure(key)
    if failed_before:
        return _Unit(functools.partial(_repeat, fn, chunk), chunk, "cuda_events", failed_before)
    if _leaves_work_behind(fn, region):
        # A capture would record only the current stream's part and the rest would run
        # once, eagerly, during capture: plain launches with device-wide ends time it all.
        why = "work left running on another stream: plain launches, device-wide ends"
        return _Unit(functools.partial(_repeat, fn, chunk), chunk, "cuda_events", why)
    graph, error = _capture(fn, chunk, region.torch)
    if graph is not None:
        return _Unit(graph.replay, chunk, "graph_replay")
    _remember_failure(key, error)
    return _Unit(functools.partial(_repeat, fn, chunk), chunk, "cuda_events", error)


class CaptureSlot:
    """What the engine remembers a failed graph capture by for callables that share
    their code and their shape: the pool members of one shape's forward, or of its
    backward, in one serving worker (``runner.worker.bench.serve``).  A capture fails
    for what the code does (autograd's engine runs a backward on its own thread; a
    value is read on the host), not for which buffers it was given, so one member's
    failure sends every member straight to plain launches."""

    __slots__ = ("__weakref__", "label")

    def __init__(self, label: str) -> None:
        self.label = label

    def __repr__(self) -> str:
        return f"CaptureSlot({self.label!r})"


def learn_capture(fn: Callable[[], object], key: object) -> str:
    """Try a graph capture of one call of ``fn`` now, outside any timed turn, and keep a
    failure under ``key`` (a ``CaptureSlot``): the timed measurements of that key then
    neither try the capture again nor run the side-stream check, which decides only
    between a graph and plain launches (plain launches end device-wide whatever
    streams the work ran on).  A capture that works is dropped and nothing is kept:
    each measurement captures its own graph, as before.  Returns the failure's text,
    or "" when the capture worked.  On a GPU only."""
    import torch

    graph, error = _capture(fn, 1, torch)
    del graph
    if error:
        _remember_failure(key, error)
    return error


def plain_launches(fn: Callable[[], object], why: str) -> None:
    """Time ``fn`` with plain launches from its first measurement on, for ``why``: a
    callable that must draw new values on new buffers at every call (the real-training
    step) is not what a graph replays, and its capture fails anyway."""
    _remember_failure(fn, why)


def _remembered_failure(key: object) -> str:
    try:
        return _UNCAPTURABLE.get(key, "")
    except TypeError:  # not weakly referenceable: never remembered
        return ""


def _remember_failure(key: object, error: str) -> None:
    try:
        _UNCAPTURABLE[key] = error
    except TypeError:
        return


class _Region:
    """One timed region: start event, work, end event on the stream, device synchronize,
    a second end event.  The stream-order end is the reading unless the device-wide end
    (less the measured cost of a synchronize) is clearly later: then work was hidden on
    another stream and the device-wide end counts."""

    def __init__(self, torch: ModuleType) -> None:
        self.torch = torch
        self.hidden = 0
        self.overhead_ms = 0.0
        self.overhead_ms = median([self._empty() for _ in range(7)])

    def _empty(self) -> float:
        t = self.torch
        start, end = t.cuda.Event(enable_timing=True), t.cuda.Event(enable_timing=True)
        t.cuda.synchronize()
        start.record()
        t.cuda.synchronize()
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    def time(self, work: Callable[[], object]) -> float:
        """Milliseconds of ``work`` (the whole region, not per call)."""
        t = self.torch
        ev = [t.cuda.Event(enable_timing=True) for _ in range(3)]
        ev[0].record()
        work()
        ev[1].record()
        t.cuda.synchronize()
        ev[2].record()
        ev[2].synchronize()
        stream_ms = float(ev[0].elapsed_time(ev[1]))
        device_ms = float(ev[0].elapsed_time(ev[2])) - self.overhead_ms
        if device_ms > stream_ms * SIDE_STREAM_SLACK + SIDE_STREAM_ABS_MS:
            self.hidden += 1
            return device_ms
        return stream_ms


@dataclass
class _WarmUp:
    seconds: float
    windows_ms: list[float]  # per-call ms of each window
    converged: bool

    @property
    def per_call_ms(self) -> float:
        return self.windows_ms[-1]

    def to_dict(self) -> dict[str, object]:
        return {
            "seconds": round(self.seconds, 4),
            "windows": len(self.windows_ms),
            "first_window_ms": self.windows_ms[0],
            "last_window_ms": self.windows_ms[-1],
            "converged": self.converged,
        }


def _leaves_work_behind(fn: Callable[[], object], region: _Region) -> bool:
    """True when every one of three short regions of ``fn`` ended on the device clearly
    after its stream (work launched on a side stream and never joined)."""
    before = region.hidden
    for _ in range(3):
        region.time(functools.partial(_repeat, fn, 3))
    return region.hidden - before == 3


def _warm_up(unit: _Unit, settings: TimingSettings, region: _Region, t0: float) -> _WarmUp:
    """Windows (50 ms, or ``batch_s`` when shorter) of the same work as the timed batches
    until the clocks have ramped: at least ``warmup_s`` since ``t0`` and three
    successive windows within 1%, capped."""
    per_call = region.time(unit.run) / unit.calls
    window_s = min(WINDOW_S, settings.batch_s)
    cap_s = max(WARMUP_CAP_MIN_S, 4 * settings.warmup_s)
    windows: list[float] = []
    while True:
        window_calls = min(MAX_ITERS, round(window_s * 1e3 / max(per_call, 1e-6)))
        reps = max(1, window_calls // unit.calls)
        per_call = region.time(functools.partial(_repeat, unit.run, reps)) / (reps * unit.calls)
        windows.append(per_call)
        elapsed = time.perf_counter() - t0
        last = windows[-WARMUP_WINDOWS:]
        agree = len(last) == WARMUP_WINDOWS and max(last) - min(last) <= WARMUP_AGREE * min(last)
        if elapsed >= settings.warmup_s and agree:
            return _WarmUp(elapsed, windows, True)
        if elapsed >= cap_s:
            return _WarmUp(elapsed, windows, False)


def _repeat(fn: Callable[[], object], n: int) -> None:
    for _ in range(n):
        fn()


def _sample(run_batch: Callable[[], float], settings: TimingSettings, cap: int) -> tuple:
    samples: list[float] = []
    t0 = time.perf_counter()
    while True:
        samples.append(run_batch())
        reason = stop_reason(samples, settings, time.perf_counter() - t0, cap)
        if reason:
            return samples, reason


def _measure_hot(
    unit: _Unit, settings: TimingSettings, region: _Region, per_call_ms: float
) -> Timing:
    replays = max(1, round(batch_iters(per_call_ms, settings) / unit.calls))
    calls = replays * unit.calls
    run = functools.partial(_repeat, unit.run, replays)
    samples, reason = _sample(lambda: region.time(run) / calls, settings, settings.max_repeats)
    extra: dict[str, object] = {"graph_error": unit.error} if unit.error else {}
    return Timing(samples, unit.method, reason, calls, extra)


def _capture(fn: Callable[[], object], n: int, torch: ModuleType) -> tuple[CUDAGraph | None, str]:
    """A graph of ``n`` back-to-back calls, replayed once; (None, why) if capture fails."""
    pool = None
    try:
        pool = torch.cuda.graph_pool_handle()  # its id, for _release_failed_capture
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            _repeat(fn, 2)  # library handles/workspaces are made on the capture stream
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=pool):
            _repeat(fn, n)
        graph.replay()
        torch.cuda.synchronize()
        return graph, ""
    except Exception as exc:  # any capture failure -> plain launches
        _repair_rng(torch)
        _release_failed_capture(torch, pool)
        try:
            torch.cuda.synchronize()
        except Exception as sync_exc:  # the context is broken: nothing will time
            raise RuntimeError(f"graph capture broke the device: {sync_exc}") from exc
        return None, f"{type(exc).__name__}: {str(exc)[:300]}"


def _release_failed_capture(torch: ModuleType, pool: tuple[int, int] | None) -> None:
    """A capture that fails inside ``torch.cuda.graph`` can leave PyTorch's caching
    allocator still allocating to the graph's private pool, and its cached blocks are
    then never handed back: ``empty_cache`` frees nothing for the rest of the process.
    On one H200 a serving worker whose backward could not be captured (the autograd engine
    ran it on the forward's stream) kept 13 GiB after its first turn, 16 GiB after its
    second and 23 GiB after its fresh step, of which 2.9 GiB were live tensors
    (docs/benchmarks.md, the H200 study at a7b91ac, 2026-12-02). The graph cannot name its
    pool after a failed capture, so ``_capture`` hands it one (``graph_pool_handle``). End
    the allocation to that pool, and when that was still to do (so ``capture_end`` never
    completed and the graph will not release its pool when it is dropped), release the pool
    too. When PyTorch had ended it, the graph releases the pool itself and a second release
    would break the allocator's count, so nothing more is done."""
    if pool is None or tuple(pool) == (0, 0):
        return
    device = torch.cuda.current_device()
    try:
        torch._C._cuda_endAllocateToPool(device, pool)
    except Exception:  # PyTorch ended it: capture_end completed
        return
    try:
        torch._C._cuda_releasePool(device, pool)
    except Exception:  # nothing more can be done; the graph's memory stays cached
        return


def _repair_rng(torch: ModuleType) -> None:
    """A failed capture leaves the default CUDA generator in capture mode (``capture_end``
    raised before the generator's epilogue), and every later random op fails with "Offset
    increment outside graph capture".  Give the generator a fresh state, same seed and
    offset where they can be read."""
    try:
        index = torch.cuda.current_device()
        gen = torch.cuda.default_generators[index]
        fresh = torch.Generator(device=f"cuda:{index}")
        try:
            fresh.set_state(gen.get_state())
        except Exception:
            fresh.manual_seed(gen.initial_seed())
        gen.graphsafe_set_state(fresh)
    except Exception:  # older torch without graph-safe generator states
        return


def _measure_cold(
    fn: Callable[[], object],
    settings: TimingSettings,
    region: _Region,
    props: _CudaDeviceProperties,
) -> Timing:
    torch = region.torch
    nbytes = flush_bytes_for(props.name, int(getattr(props, "L2_cache_size", 0)))
    flush = torch.empty(nbytes // 4, dtype=torch.int32, device="cuda")

    def one() -> float:
        flush.zero_()  # stream order: done before the start event
        return region.time(fn)

    cap = max(settings.max_repeats, settings.repeats) * COLD_SAMPLE_FACTOR
    samples, reason = _sample(one, settings, cap)
    return Timing(samples, "cuda_events", reason, 1, {"flush_bytes": nbytes})
