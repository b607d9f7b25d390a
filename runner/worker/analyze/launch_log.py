"""Every ``kernel[grid](...)`` launch a call makes, recorded instead of run.

``recording()`` replaces ``KernelInterface.__getitem__`` (the launch syntax of Triton's
``JITFunction``, ``Autotuner`` and ``Heuristics`` alike) for its scope, so a project's
own wrapper runs as it would on the GPU and each launch it makes is written down:

* an ``Autotuner`` launches its autotune list's first config (after the list's own
  ``early_config_prune``, where it has one): the first one the autotuner tries, the one a
  change to the list moves; its constexprs and ``num_warps`` / ``num_stages`` /
  backend options (``matrix_instr_nonkdim``, ...) join the launch's keywords, as
  ``Autotuner.run`` passes them;
* a ``Heuristics`` adds the values its functions compute from the arguments;
* Triton's AMD compiler knobs (``triton.knobs.amd``) are read at the launch, since a
  wrapper may set them for the scope of its launch only.

Nothing runs on a device: the arguments may be meta or CPU tensors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runner.worker.analyze.launches import JitKernel

__all__ = ["KNOBS", "LaunchLog", "Recorded", "recording"]

# The AMD knobs that change code generation (Triton 3.6 ``triton.knobs.amd``).
KNOBS = (
    "use_buffer_ops",
    "use_buffer_atomics",
    "buffer_ops_analyze_small_tensor_range",
    "use_block_pingpong",
    "use_in_thread_transpose",
    "use_async_copy",
    "scalarize_packed_fops",
)


@dataclass
class Recorded:
    """One launch: the JIT function, its arguments as the JIT receives them, the knobs
    in force, which step of the recipe made it and, for an autotuned kernel, which
    config of how many."""

    step: str
    fn: JitKernel
    args: tuple[object, ...]
    kwargs: dict[str, object]
    knobs: dict[str, object]
    autotune: str | None = None


@dataclass
class LaunchLog:
    step: str = ""
    launches: list[Recorded] = field(default_factory=list)


def knobs_now() -> dict[str, object]:
    import triton

    amd = triton.knobs.amd
    return {k: getattr(amd, k) for k in KNOBS if hasattr(amd, k)}


def _resolve(
    kernel: Any, args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[JitKernel, dict[str, object], str | None]:
    """The JIT function under autotune / heuristics wrappers and the keywords they add."""
    from triton.runtime.autotuner import Autotuner, Heuristics

    note = None
    kwargs = dict(kwargs)
    while isinstance(kernel, (Autotuner, Heuristics)):
        named = {**dict(zip(kernel.arg_names, args, strict=False)), **kwargs}
        if isinstance(kernel, Autotuner):
            configs = list(kernel.configs)
            if kernel.early_config_prune:
                configs = list(kernel.early_config_prune(configs, named, **kwargs))
            kwargs.update(configs[0].all_kwargs())
            note = f"config 1 of the {len(kernel.configs)} of its autotune list"
        else:
            for name, heuristic in kernel.values.items():
                kwargs[name] = heuristic(named)
        kernel = kernel.fn
    return kernel, kwargs, note


@contextlib.contextmanager
def recording() -> Iterator[LaunchLog]:
    """Record every launch made in the scope (``log.step`` names the step making it)."""
    from triton.runtime.jit import KernelInterface

    log = LaunchLog()
    saved = KernelInterface.__getitem__

    def getitem(self: Any, grid: object) -> Any:
        def launch(*args: object, **kwargs: object) -> None:
            fn, merged, note = _resolve(self, args, kwargs)
            log.launches.append(Recorded(log.step, fn, args, merged, knobs_now(), note))

        return launch

    KernelInterface.__getitem__ = getitem
    try:
        yield log
    finally:
        KernelInterface.__getitem__ = saved
