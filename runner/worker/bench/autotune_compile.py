"""Every config of a Triton autotune sweep compiled at once, in threads, before the
first one is timed.

Triton's autotuner compiles each config on its first call inside the sweep's timing
loop (``Autotuner._bench`` of ``triton.runtime.autotuner``, triton-lang/triton 3.6.0),
one after the other, while the worker holds the device alone
(``runner.worker.bench.autotune_alone``): a kernel source new to the role's JIT cache (a
candidate's) compiles 32-64 configs per kernel serially while every other worker waits
for the device.  ``install`` wraps ``_bench`` so that the first config of a sweep first
hands every config of the sweep to Triton's own asynchronous compile
(``triton.runtime._async_compile.AsyncCompileMode``, which ``JITFunction._do_compile``
submits to an executor) on a pool of threads, by Triton's ``warmup`` call (compile,
no launch); Triton's compiler gives up the GIL while it runs its passes and ``ptxas``,
so the threads compile side by side.  The timing loop then finds each config compiled.

What runs is unchanged: the same calls compile the same kernels under the same cache
keys (a config the platform layer launches without its AMD-only options compiles as
that launch does, since ``warmup`` goes through the same ``JITFunction.run``).  A
config whose compile fails is left to the timing loop, which compiles it again and
reports the failure as Triton does (an infinite time).

The serving worker installs it for its preparation (``runner.worker.bench.serve``); the
isolated ``python`` of a test command (the focused test, upstream's quick script, the
suite: ``runner.core.startup.COMMAND_BOOT``) installs it when the command first imports
Triton's autotuner (``install_on_import``), so a command that never imports Triton pays
nothing.

Worker-side: imports Triton only when it is installed; no pydantic.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.machinery
import importlib.util
import logging
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from types import ModuleType
from typing import Protocol

log = logging.getLogger(__name__)

_MARK = "__turbo_campaign_compile_all__"
_SWEEP = "__turbo_campaign_sweep__"  # the id of the sweep whose configs were compiled


class _Config(Protocol):  # triton.Config
    def all_kwargs(self) -> dict[str, object]: ...


class _Launcher(Protocol):  # a JITFunction, or a heuristics wrapper around one
    def run(self, *args: object, **kwargs: object) -> object: ...


class _Autotuner(Protocol):  # triton.runtime.autotuner.Autotuner
    fn: _Launcher

    def prune_configs(self, kwargs: dict[str, object]) -> Sequence[_Config]: ...


def threads() -> int:
    """The compile threads: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def install() -> str | None:
    """Wrap ``Autotuner._bench``; returns None when sweeps compile their configs at once
    (or there is no Triton), else why they compile one by one."""
    if importlib.util.find_spec("triton") is None:
        return None
    try:
        from triton.runtime import _async_compile  # noqa: F401
        from triton.runtime.autotuner import Autotuner
    except ImportError as exc:
        return f"this Triton has no asynchronous compile ({exc})"
    bench = getattr(Autotuner, "_bench", None)
    if not callable(bench) or not callable(getattr(Autotuner, "prune_configs", None)):
        return "this Triton's Autotuner has no _bench or prune_configs"
    if not getattr(bench, _MARK, False):
        Autotuner._bench = _compiling_first(bench)
    return None


AUTOTUNER = "triton.runtime.autotuner"


Hook = Callable[[], object]


class _Then(importlib.abc.Loader):
    """The autotuner module's own loader, then the hooks."""

    def __init__(self, inner: importlib.abc.Loader, hooks: Sequence[Hook]) -> None:
        self._inner = inner
        self._hooks = hooks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        for hook in self._hooks:
            hook()


class _OnImport(importlib.abc.MetaPathFinder):
    def __init__(self, hooks: Sequence[Hook]) -> None:
        self._hooks = hooks

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != AUTOTUNER:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _Then(spec.loader, self._hooks)
        return spec


def install_on_import(*first: Hook) -> None:
    """``install`` (after ``first``: other wrappers of the autotuner, such as
    ``autotune_alone.install``) now if Triton's autotuner is imported, else as soon as
    it is."""
    hooks = (*first, install)
    if AUTOTUNER in sys.modules:
        for hook in hooks:
            hook()
    elif not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(hooks))


def _compiling_first(bench: Callable[..., object]) -> Callable[..., object]:
    @functools.wraps(bench)
    def wrapper(self: _Autotuner, *args: object, config: object, **meta: object) -> object:
        # ``run`` sets ``nargs`` anew for each call, so its identity names the sweep
        sweep = id(getattr(self, "nargs", None))
        if getattr(self, _SWEEP, None) != sweep:
            setattr(self, _SWEEP, sweep)
            compile_all(self, args, meta, list(self.prune_configs(meta)))
        return bench(self, *args, config=config, **meta)

    setattr(wrapper, _MARK, True)
    return wrapper


def compile_all(
    autotuner: _Autotuner,
    args: tuple[object, ...],
    meta: dict[str, object],
    configs: Sequence[_Config],
) -> int:
    """Compile ``configs`` of ``autotuner`` for ``args``/``meta`` side by side; returns
    how many were handed to the compiler (failures are left to the timing loop)."""
    from triton.runtime._async_compile import AsyncCompileMode, active_mode

    if len(configs) < 2 or active_mode.get() is not None:
        return 0
    handed, refused = 0, ""
    with (
        ThreadPoolExecutor(min(threads(), len(configs)), thread_name_prefix="compile") as pool,
        AsyncCompileMode(pool, ignore_errors=True),
    ):
        for config in configs:
            # the launch's own keywords (its grid among them), compiled and not launched
            call = {"grid": (1,), **meta, **config.all_kwargs(), "warmup": True}
            try:
                autotuner.fn.run(*args, **call)
            except Exception as exc:  # the timing loop compiles it again and reports it
                refused = refused or f"{type(exc).__name__}: {exc}"
                continue
            handed += 1
    log.info(
        "%d of %d configs compiled ahead on %d threads%s",
        handed,
        len(configs),
        min(threads(), len(configs)),
        f" (first refusal: {refused})" if refused else "",
    )
    return handed
