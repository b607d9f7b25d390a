"""Triton's autotuning, alone on the device, while the rest of a worker's preparation
shares it (``runner.core.prepare_lock.DeviceLock``).

Triton's autotuner times configs only in two methods of
``triton.runtime.autotuner.Autotuner`` (triton-lang/triton at 009401737888):
``check_disk_cache(tuning_key, configs, bench_fn)``, which reads a result kept on disk
(``TRITON_CACHE_AUTOTUNING``, set per role by ``runner.executors.jit_cache``) or times
the configs and writes one, and ``_bench(*args, config, **meta)``, which times one
config (called by ``bench_fn``, and directly when results are not kept).  ``install``
wraps both, once per process, so that while ``holding(lock)`` is active each call runs
inside ``lock.exclusive()``: no other worker runs a kernel on the device meanwhile.
A result already kept on disk is read first without the hold (``check_disk_cache``
called with a timing function that stops it at a miss, before anything is written:
reading times nothing, and Triton's cache writes each result whole, by rename); a miss
first compiles the sweep's configs without the hold (``_compile_first``), then takes
the exclusive hold, inside which the whole read-or-time-and-write runs
again, so the second worker of a role waits for the first one's result and reads it
instead of timing the configs again.  Outside ``holding`` (the timed turns, the CPU)
the wrappers call straight through.

A test command the host runs beside the workers' start-up (upstream's quick script)
takes part too: its ``python`` is told the lock file (``COMMAND_LOCK_ENV``) and
``join_as_command`` holds it shared from the interpreter's start to its exit, and alone
from its first autotune to its exit, so its sweeps time their configs alone and its own
timing loops, which come after, run while no worker prepares; the workers read the
choices it kept instead of timing them again.  Its children do not take part (the
variable is removed; a child that asked to be alone would wait for its parent's shared
hold, and the parent for the child): while the command's process lives, its hold keeps
every other process's autotune out, so a child's kernels never meet one.

Worker-side: imports Triton only when it is installed; no pydantic.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import os
from collections.abc import Callable, Iterator
from typing import Any

from runner.core.prepare_lock import COMMAND_LOCK_ENV, DeviceLock

HOOKED = ("check_disk_cache", "_bench")  # the Autotuner methods that time configs
_MARK = "__turbo_campaign_alone__"
_held: list[DeviceLock] = []  # the lock of the preparation under way, if any
_kept = contextlib.ExitStack()  # a command's holds, kept until its process exits
_to_the_end: list[bool] = []  # set: the next exclusive hold is kept to the end


def install() -> str | None:
    """Wrap Triton's autotuner (``HOOKED``); returns None when every autotune of this
    process will be alone on the device (hooked, or no Triton to autotune), else why
    not (the worker then prepares each shape alone)."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError as exc:
        return f"Triton's autotuner could not be imported ({exc})"
    missing = [name for name in HOOKED if not callable(getattr(Autotuner, name, None))]
    if "_bench" in missing:
        return f"this Triton's Autotuner has no {', '.join(missing)}"
    for name in HOOKED:
        method = getattr(Autotuner, name, None)
        if callable(method) and not getattr(method, _MARK, False):
            setattr(Autotuner, name, alone_on_device(method))
    return None


class _Miss(Exception):
    """Raised by the timing function of a read without the hold: nothing is kept yet."""


def _miss() -> None:
    raise _Miss


class _Compiled(Exception):
    """Raised by the hooked ``_bench`` of a sweep run only to compile its configs."""


_compiling: list[bool] = []  # set while a sweep runs only to compile


# Triton's own timing function (``benchmark`` in ``Autotuner.run``, triton 3.6.0): it
# times each config through ``_bench``, and nothing before the first call
BENCHMARK = ("triton.runtime.autotuner", "Autotuner.run.<locals>.benchmark")


def _times_through_bench(bench_fn: Callable[[], object]) -> bool:
    """Whether ``bench_fn`` is ``BENCHMARK``: another one (a subclass's, a fork's) may
    time without ``_bench``, so it is never run outside the hold."""
    where = (getattr(bench_fn, "__module__", ""), getattr(bench_fn, "__qualname__", ""))
    return where == BENCHMARK


def _compile_first(bench_fn: Callable[[], object]) -> None:
    """A miss, before it waits to be alone: Triton's timing function runs until its
    first ``_bench``, where ``autotune_compile``'s wrapper (the outer one) compiles every
    config of the sweep side by side and the hooked ``_bench`` (``alone_on_device``)
    stops it before anything is timed.  So the compile (CPU only) runs while the other
    workers use the device, and inside the hold the timing loop finds each config
    compiled; without that wrapper nothing is compiled here and nothing is lost."""
    _compiling.append(True)
    try:
        bench_fn()
    except _Compiled:
        pass
    finally:
        _compiling.clear()


def alone_on_device(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (one of ``HOOKED``) run alone on the held lock's device; a kept
    result read first without the hold (``check_disk_cache``)."""
    reads_first = method.__name__ == "check_disk_cache"

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if _compiling and not reads_first:  # ``_bench``: the sweep is compiled now
            raise _Compiled
        if not _held:
            return method(*args, **kwargs)
        if reads_first and len(args) == 4 and not kwargs:  # (self, key, configs, bench_fn)
            with contextlib.suppress(_Miss):
                return method(*args[:3], _miss)
            if _times_through_bench(args[3]):
                _compile_first(args[3])
        lock = _held[-1]
        _alone_to_the_end(lock)  # a joined command's first autotune
        with lock.exclusive():
            return method(*args, **kwargs)

    setattr(wrapper, _MARK, True)
    return wrapper


@contextlib.contextmanager
def holding(lock: DeviceLock) -> Iterator[None]:
    """Every autotune of this process inside the block is alone on ``lock``'s device."""
    _held.append(lock)
    try:
        yield
    finally:
        _held.remove(lock)


def install_in_command() -> None:
    """``install`` in a process that joined as a command (``join_as_command``), once it
    imports Triton's autotuner; where the autotuner cannot be hooked the process is
    alone on the device from here to its exit, as an unhooked worker prepares each
    shape alone (its sweeps would otherwise time their configs beside the workers)."""
    if install() is not None and _held:
        _alone_to_the_end(_held[-1])


def _alone_to_the_end(lock: DeviceLock) -> None:
    """In a process that joined as a command, the first time: hold ``lock`` alone until
    the process exits; else nothing."""
    if _to_the_end:
        _to_the_end.clear()
        _kept.enter_context(lock.exclusive())


def join_as_command() -> bool:
    """In a test command's process: when the host named the device's lock
    (``COMMAND_LOCK_ENV``), hold it shared until the process exits and alone from the
    first autotune on (the module's docstring); the variable is removed, so no child
    takes part.  Returns whether it joined; the caller installs the hooks
    (``install_in_command``) once Triton's autotuner is imported."""
    path = os.environ.pop(COMMAND_LOCK_ENV, "").strip()
    if not path:
        return False
    lock = _kept.enter_context(DeviceLock(path))
    _kept.enter_context(lock.shared())
    _held.append(lock)
    _to_the_end.append(True)
    return True
