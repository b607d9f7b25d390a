"""The timing seam of the worker.

``measure(fn, settings, device)`` times a zero-argument callable and returns a
``Timing``.  On the CPU it is a host ``perf_counter`` batch loop (the only honest clock
there).  On a GPU it hands over to ``runner.worker.bench.gpu.measure_gpu`` (device events over
back-to-back batches, graph replay where possible, stop-on-noise, cache modes).
Worker-side: imports torch lazily, never pydantic.
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable

from runner.core.spec import TimingSettings
from runner.worker.bench.proctree import TreeGuard
from runner.worker.bench.timing_result import Timing

# The clocks as they were when the runner was imported, before any target code ran
# (the worker imports this module before it imports the target).  The CPU engine
# reads these bindings, not ``time.<clock>``, and ``check_clocks`` refuses to go on
# when the target replaced a clock in the ``time`` module (docs/measurement.md §5.4: timer
# patching is a known way to cheat a harness).
CLOCK_NAMES = (
    "perf_counter",
    "perf_counter_ns",
    "process_time",
    "process_time_ns",
    "monotonic",
    "monotonic_ns",
    "time",
    "time_ns",
    "thread_time",
    "thread_time_ns",
)
_REAL_CLOCKS = {name: getattr(time, name) for name in CLOCK_NAMES if hasattr(time, name)}
perf_counter = time.perf_counter
process_time = time.process_time


class ClockTampered(RuntimeError):
    """The measured code replaced a clock of the ``time`` module."""


def not_builtin(clocks: dict[str, object]) -> list[str]:
    """The names in ``clocks`` whose function is not the ``time`` module's own C
    builtin of that name (a Python wrapper, another clock under its name): the clock
    guard's check that what it holds is real before it trusts it (docs/reliability.md §7 row 20: a
    start-up hook that ran before the harness could have replaced them first)."""
    return [
        name
        for name, fn in clocks.items()
        if not isinstance(fn, types.BuiltinFunctionType)
        or fn.__name__ != name
        or not isinstance(fn.__self__, types.ModuleType)
        or fn.__self__.__name__ != "time"
    ]


def check_clocks() -> None:
    """Raise ``ClockTampered`` if a clock the runner holds is not the C builtin, or
    any clock of ``time`` is not the one seen at import."""
    fake = not_builtin({**_REAL_CLOCKS, "perf_counter": perf_counter, "process_time": process_time})
    if fake:
        raise ClockTampered(
            "clock guard: time." + ", time.".join(fake) + " is not the interpreter's C "
            "builtin (replaced before the harness started: a start-up hook such as a "
            "sitecustomize or a .pth file); refusing to time with it"
        )
    changed = [name for name, real in _REAL_CLOCKS.items() if getattr(time, name, None) is not real]
    if changed:
        raise ClockTampered(
            "the measured code replaced time."
            + ", time.".join(changed)
            + ": timer patching, refusing to time it"
        )


def measure(fn: Callable[[], object], settings: TimingSettings, device: str) -> Timing:
    """Time ``fn`` on ``device`` ("cpu" or "cuda:N"/"cuda")."""
    check_clocks()  # the clocks it holds are the C builtins before it trusts them
    use_gpu = settings.engine == "gpu" or (settings.engine == "auto" and device != "cpu")
    if use_gpu:
        from runner.worker.bench.gpu import measure_gpu

        timing = measure_gpu(fn, settings, device)
    else:
        timing = measure_cpu(fn, settings)
    check_clocks()  # a clock replaced during the timed calls voids this timing
    return timing


def measure_cpu(fn: Callable[[], object], settings: TimingSettings) -> Timing:
    """CPU batches: warm up for ``warmup_s``, size batches to ``batch_s``, then sample
    until the median's relative error is under target, or the budget ends.

    The clock is the process's CPU time (``time.process_time``), not the wall clock:
    on a shared machine another process preempting the worker inflates wall time but
    not the CPU time the work consumed, so paired verdicts stay stable under load.
    The worker runs CPU passes single-threaded, where the two agree on an idle host.
    That clock does not see other processes: ``runner.worker.bench.proctree.TreeGuard`` reads
    the process tree around every batch and refuses work done elsewhere (``ClockBlind``)."""
    iters = _warm_up(fn, settings)
    samples: list[float] = []
    start = perf_counter()
    stop_reason = "max_repeats"
    tree = TreeGuard()  # its readings are taken outside the process-time window
    while len(samples) < settings.max_repeats:
        tree.start()
        t0 = process_time()
        for _ in range(iters):
            fn()
        t1 = process_time()
        tree.stop()
        samples.append((t1 - t0) * 1e3 / iters)
        timing = Timing(samples, CPU_CLOCK, "", iters)
        if len(samples) >= settings.repeats and timing.rsd_of_median <= settings.target_rsd:
            stop_reason = "converged"
            break
        if len(samples) >= settings.repeats and perf_counter() - start > settings.budget_s:
            stop_reason = "budget"
            break
    tree.check()  # work done in another process or thread: ClockBlind, named
    return Timing(samples, CPU_CLOCK, stop_reason, iters)


CPU_CLOCK = "process_time"


def _warm_up(fn: Callable[[], object], settings: TimingSettings) -> int:
    """Run ``fn`` for at least ``warmup_s`` (and at least twice); return the batch size."""
    fn()
    count, t0 = 0, perf_counter()
    while True:
        fn()
        count += 1
        elapsed = perf_counter() - t0
        if elapsed >= settings.warmup_s and count >= 1:
            break
    if settings.iters_per_repeat > 0:
        return settings.iters_per_repeat
    per_call = elapsed / count
    return max(1, min(1000, round(settings.batch_s / per_call)))
