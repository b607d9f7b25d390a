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
reading times nothing, and Triton's cache writes each result whole, by rename); only a
miss takes the exclusive hold, inside which the whole read-or-time-and-write runs
again, so the second worker of a role waits for the first one's result and reads it
instead of timing the configs again.  Outside ``holding`` (the timed turns, the CPU)
the wrappers call straight through.

Worker-side: imports Triton only when it is installed; no pydantic.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Callable, Iterator
from typing import Any

from runner.core.prepare_lock import DeviceLock

HOOKED = ("check_disk_cache", "_bench")  # the Autotuner methods that time configs
_MARK = "__turbo_campaign_alone__"
_held: list[DeviceLock] = []  # the lock of the preparation under way, if any


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


def alone_on_device(method: Callable[..., Any]) -> Callable[..., Any]:
    """``method`` (one of ``HOOKED``) run alone on the held lock's device; a kept
    result read first without the hold (``check_disk_cache``)."""
    reads_first = method.__name__ == "check_disk_cache"

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if not _held:
            return method(*args, **kwargs)
        if reads_first and len(args) == 4 and not kwargs:  # (self, key, configs, bench_fn)
            with contextlib.suppress(_Miss):
                return method(*args[:3], _miss)
        with _held[-1].exclusive():
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
