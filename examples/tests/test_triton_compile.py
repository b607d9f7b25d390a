"""Ahead-of-time compilation of every Triton kernel of the example package, with no GPU.

The cases and the compile are the product's (``runner.worker.analyze``: a campaign's kernel
facts compile the same launches).  Each case calls a real wrapper (``gemm_triton``,
``quantize_fp8_triton``, ...) on meta tensors, with the kernel replaced by a recorder,
so the arguments, constexprs and launch options are the ones the wrapper launches with,
its config dict (``GEMM_CONFIG``, ``GROUPED_GEMM_CONFIG``, ...) included.  The recorded
launch is specialised as Triton's JIT specialises a launch (an int argument equal to 1
becomes a constexpr, other ints are i32 or i64 by value, ints and pointers divisible by
16 get ``tt.divisibility``, and on AMD with buffer ops on, pointers to tensors under
2 GiB get ``tt.pointer_range``), then compiled with ``triton.compile(ASTSource(...),
target=...)`` down to a cubin (NVIDIA sm90) or an hsaco (AMD gfx942 / gfx950).  This
catches frontend and type errors ("Loop-carried variable ... re-assigned") and shared
memory / LDS use over the target's limit, which Triton checks only when it loads a
kernel on a device (``OutOfResources``).

FP8 tensors take the target's types, as ``turbo_kernels.pytorch.core.low_precision``
picks them: float8_e4m3fn / float8_e5m2 (tl.float8e4nv / tl.float8e5) on sm90 and
gfx950, the fnuz variants (tl.float8e4b8 / tl.float8e5b16) on gfx942.

The configs are H200 defaults; the wrappers adapt them to the GPU they launch on
(``turbo_kernels.triton.arch.launch_config``: at most two pipeline stages on MI300).  Each
case records its launch with ``gpu_arch()`` answering the target's name, so what compiles
is what the wrapper would launch there, and any shared memory / LDS overflow fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

triton: Any = pytest.importorskip("triton")

from runner.worker.analyze.example_cases import CASES, DEVICE_FUNCTIONS, MODULES, Case, record  # noqa: E402
from runner.worker.analyze.launches import TARGETS, compile_launch  # noqa: E402


def _short(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def _params() -> Iterator[Any]:
    for case in CASES:
        for name in TARGETS:
            yield pytest.param(case, name, id=f"{case.id}-{name}")


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Compile for real on every run: a private, empty Triton cache for this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


@pytest.mark.parametrize(("case", "target_name"), list(_params()))
def test_compile(case: Case, target_name: str) -> None:
    target = TARGETS[target_name]
    fn, launch = record(case, target_name, target)
    compiled, options = compile_launch(fn, launch, target)
    binary = "cubin" if target.backend == "cuda" else "hsaco"
    assert compiled.asm.get(binary), f"no {binary} for {case.kernel} on {target_name}"
    shared = compiled.metadata.shared
    if shared <= target.max_shared:
        return
    pytest.fail(
        f"{case.kernel} with {options} needs {shared} B of shared memory, {target_name} has "
        f"{target.max_shared} B: launching it there raises OutOfResources"
    )


def test_every_kernel_has_a_case() -> None:
    kernels = {
        f"{_short(module)}.{name}"
        for module in MODULES
        for name, obj in vars(module).items()
        if isinstance(obj, triton.runtime.jit.JITFunction) and obj.__module__ == module.__name__
    }
    covered = {f"{_short(case.module)}.{case.kernel}" for case in CASES}
    assert kernels - DEVICE_FUNCTIONS == covered
