"""PLATFORM LAYER of turbo-campaign's workspace minimal stack, for NVIDIA development
hosts (docs/primus-turbo.md, "NVIDIA development hosts: the platform layer"): not
upstream's file, never
synced back, never written into a stack declared for ROCm, and a no-op on a ROCm
torch even if it is there.

Primus-Turbo (checked at a6a16cdc) makes two choices that only AMD GPUs run; this
layer makes both take gfx950's (MI355X's) path on CUDA:

* ``primus_turbo/pytorch/core/low_precision.py`` picks FNUZ FP8
  (``float8_e4m3fnuz``) where ``check_fp8_ocp_support`` finds a compute capability
  below (9, 5), which every CUDA device reports: here the module, once upstream's own
  code has run, holds OCP FP8 (``float8_e4m3fn``/``float8_e5m2``) and its check says
  so, as on gfx950;
* its Triton kernels pass the AMD-only launch options ``matrix_instr_nonkdim``,
  ``waves_per_eu`` and ``kpack`` (at launch, and inside ``triton.Config`` kwargs of
  the blockwise autotune lists), which CUDA Triton refuses (``KeyError: Keyword
  argument matrix_instr_nonkdim was specified but unrecognised``): here Triton's
  launch drops them, so each such config runs as the one without the option, and an
  autotune list times each config that is left the same only once (the NN list's
  ``matrix_instr_nonkdim=16`` copies, distinct on gfx950, would be timed twice).

The kernel files are untouched: the layer wraps the import of ``low_precision``,
Triton's ``JITFunction.run`` and ``Autotuner.prune_configs``.  The stack's
``primus_turbo/__init__.py`` imports this module first, so it is in place before any
upstream module runs.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any, Protocol, TypeVar

LOW_PRECISION = "primus_turbo.pytorch.core.low_precision"
AMD_ONLY_OPTIONS = ("matrix_instr_nonkdim", "waves_per_eu", "kpack")
# what the layer changes, as UPSTREAM.yaml, every round and the report name it
APPLIED = (
    "ocp_fp8: low_precision.py takes gfx950's OCP FP8 branch",
    "no_amd_launch_options: Triton launches drop "
    + "/".join(AMD_ONLY_OPTIONS)
    + ", and an autotune list times each config left the same once",
)


def on_cuda() -> bool:
    """True under a CUDA build of torch (not ROCm, not CPU-only)."""
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return getattr(torch.version, "hip", None) is None and torch.version.cuda is not None


def take_ocp(module: ModuleType) -> None:
    """gfx950's branch of low_precision.py: OCP FP8 formats, and the check saying so."""
    import torch

    module.check_fp8_ocp_support = lambda: (True, "")  # type: ignore[attr-defined]
    module.float8_e4m3 = torch.float8_e4m3fn  # type: ignore[attr-defined]
    module.float8_e5m2 = torch.float8_e5m2  # type: ignore[attr-defined]


class _OcpLoader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        take_ocp(module)


class OcpFinder(importlib.abc.MetaPathFinder):
    """Finds ``low_precision`` where Python would and runs it with ``take_ocp`` after."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != LOW_PRECISION:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is not None and spec.loader is not None:
            spec.loader = _OcpLoader(spec.loader)
        return spec


def drop_amd_options(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in kwargs.items() if k not in AMD_ONLY_OPTIONS}


def patch_launch(jit_class: Any) -> None:
    """``jit_class.run`` (Triton's launch; autotuners and heuristics end there) without
    the AMD-only options; patching twice is a no-op."""
    run = jit_class.run
    if getattr(run, "turbo_campaign_layer", False):
        return

    def launch(self: Any, *args: Any, **kwargs: Any) -> Any:
        return run(self, *args, **drop_amd_options(kwargs))

    launch.turbo_campaign_layer = True  # type: ignore[attr-defined]
    jit_class.run = launch


class _Config(Protocol):  # triton.Config
    pre_hook: object

    def all_kwargs(self) -> dict[str, object]: ...


C = TypeVar("C", bound=_Config)


def _launched_as(config: _Config) -> str:
    """What a ``triton.Config`` launches as here: its options without the AMD-only ones."""
    return repr((sorted(drop_amd_options(config.all_kwargs()).items()), config.pre_hook))


def distinct_configs(configs: Sequence[C]) -> list[C]:
    """``configs`` with each one that launches as an earlier one left out, in order."""
    seen: set[str] = set()
    kept: list[C] = []
    for config in configs:
        launched = _launched_as(config)
        if launched not in seen:
            seen.add(launched)
            kept.append(config)
    return kept


def patch_prune(autotuner_class: Any) -> None:
    """``autotuner_class.prune_configs`` (the configs an autotune times) keeping one of
    each config that launches the same here; patching twice is a no-op."""
    prune = autotuner_class.prune_configs
    if getattr(prune, "turbo_campaign_layer", False):
        return

    def pruned(self: Any, *args: Any, **kwargs: Any) -> list[Any]:
        return distinct_configs(prune(self, *args, **kwargs))

    pruned.turbo_campaign_layer = True  # type: ignore[attr-defined]
    autotuner_class.prune_configs = pruned


def install() -> None:
    """Both halves; refused when low_precision was imported before (it would keep FNUZ)."""
    if LOW_PRECISION in sys.modules:
        raise RuntimeError(
            f"{LOW_PRECISION} was imported before the platform layer: import primus_turbo "
            "(whose __init__ installs the layer) first"
        )
    if not any(isinstance(f, OcpFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, OcpFinder())
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    patch_launch(JITFunction)
    patch_prune(Autotuner)


if __name__ != "__main__" and __name__.startswith("primus_turbo") and on_cuda():
    install()
