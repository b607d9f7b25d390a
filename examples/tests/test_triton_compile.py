"""Ahead-of-time compilation of every Triton kernel of the example package, with no GPU.

Each case calls a real wrapper (``gemm_triton``, ``quantize_fp8_triton``, ...) on meta
tensors, with the kernel replaced by a recorder, so the arguments, constexprs and launch
options are the ones the wrapper launches with, its config dict (``GEMM_CONFIG``,
``GROUPED_GEMM_CONFIG``, ...) included.  The recorded launch is specialised as Triton's
JIT specialises a launch (an int argument equal to 1 becomes a constexpr, other ints are
i32 or i64 by value, ints and pointers divisible by 16 get ``tt.divisibility``, and on AMD
with buffer ops on, pointers to tensors under 2 GiB get ``tt.pointer_range``), then
compiled with ``triton.compile(ASTSource(...), target=...)`` down to a cubin (NVIDIA sm90)
or an hsaco (AMD gfx942 / gfx950).  This catches frontend and type errors ("Loop-carried
variable ... re-assigned") and shared memory / LDS use over the target's limit, which
Triton checks only when it loads a kernel on a device (``OutOfResources``).

FP8 tensors take the target's types, as ``turbo_kernels.pytorch.core.low_precision``
picks them: float8_e4m3fn / float8_e5m2 (tl.float8e4nv / tl.float8e5) on sm90 and
gfx950, the fnuz variants (tl.float8e4b8 / tl.float8e5b16) on gfx942.

The configs are H200 defaults; the wrappers adapt them to the GPU they launch on
(``turbo_kernels.triton.arch.launch_config``: at most two pipeline stages on MI300).  Each
case records its launch with ``gpu_arch()`` answering the target's name, so what compiles
is what the wrapper would launch there, and any shared memory / LDS overflow fails.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import pytest
import torch

triton: Any = pytest.importorskip("triton")

from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from turbo_kernels.triton import (  # noqa: E402
    arch,
    attention_kernel,
    gemm_fp8_kernel,
    gemm_kernel,
    grouped_gemm_kernel,
    quantize_kernel,
)

MODULES = (attention_kernel, gemm_fp8_kernel, gemm_kernel, grouped_gemm_kernel, quantize_kernel)
DEVICE_FUNCTIONS = {"gemm_kernel._tile_ids"}  # @triton.jit helpers called by kernels, not launched

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
TRITON_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.int64: "i64",
    torch.float8_e4m3fn: "fp8e4nv",
    torch.float8_e4m3fnuz: "fp8e4b8",
    torch.float8_e5m2: "fp8e5",
    torch.float8_e5m2fnuz: "fp8e5b16",
}


@dataclass(frozen=True)
class Target:
    backend: str
    arch: int | str
    warp_size: int
    e4m3: torch.dtype
    e5m2: torch.dtype
    max_shared: int  # bytes per block: H200 227 KiB (opt-in), MI300 64 KiB, MI355 160 KiB


TARGETS = {
    "sm90": Target("cuda", 90, 32, torch.float8_e4m3fn, torch.float8_e5m2, 232448),
    "gfx942": Target("hip", "gfx942", 64, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, 65536),
    "gfx950": Target("hip", "gfx950", 64, torch.float8_e4m3fn, torch.float8_e5m2, 163840),
}


@dataclass(frozen=True)
class Case:
    """One launch of ``module.<kernel>``, made by ``call(target)`` calling the wrapper."""

    id: str
    module: ModuleType
    kernel: str
    call: Callable[[Target], object]


def _mat(rows: int, cols: int, dtype: torch.dtype, major: str = "row") -> torch.Tensor:
    """A (rows, cols) meta tensor, row-major or column-major (a transposed view)."""
    if major == "row":
        return torch.empty(rows, cols, dtype=dtype, device="meta")
    return torch.empty(cols, rows, dtype=dtype, device="meta").t()


def _fp8(target: Target, fmt: str) -> torch.dtype:
    return target.e4m3 if fmt == "e4m3" else target.e5m2


def _name(dtype: torch.dtype) -> str:
    return TRITON_DTYPES[dtype]


M, N, K = 4096, 2048, 1024  # multiples of 16, as production shapes are
LAYOUTS = {  # majors of a (M, K) and b (N, K) as the GEMM ops pass them
    "NT": ("row", "row"),  # forward with trans_b=True
    "NN": ("row", "col"),  # forward with trans_b=False; grad_a = grad_out @ b
    "TN": ("col", "col"),  # grad_b = grad_out.T @ a
    "TT": ("col", "row"),  # trans_a=True
}


def _gemm_cases() -> Iterator[Case]:
    for dtype, layouts in ((BF16, list(LAYOUTS)), (FP16, ["NT"])):
        for layout in layouts:
            am, bm = LAYOUTS[layout]

            def call(t: Target, dtype: torch.dtype = dtype, am: str = am, bm: str = bm) -> object:
                return gemm_kernel.gemm_triton(_mat(M, K, dtype, am), _mat(N, K, dtype, bm), dtype)

            yield Case(f"gemm-{_name(dtype)}-{layout}", gemm_kernel, "_gemm_kernel", call)


def _gemm_fp8_cases() -> Iterator[Case]:
    # a x b formats: E4M3 (every pass of the E4M3 format, HYBRID forward), E5M2 (every
    # pass of the E5M2 format), E5M2 x E4M3 (HYBRID backward: grad_out times an operand).
    # Tensorwise and rowwise operands keep the layout of the high-precision tensors.
    scaled = [(False, fa, fb, layout) for fa, fb in (("e4m3", "e4m3"), ("e5m2", "e4m3"))
              for layout in ("NT", "NN", "TN")]  # fmt: skip
    scaled += [(False, "e5m2", "e5m2", "NT"), (True, "e4m3", "e4m3", "NT")]
    scaled += [(True, "e5m2", "e5m2", "NN"), (True, "e5m2", "e4m3", "TN")]
    for rowwise, fa, fb, layout in scaled:
        am, bm = LAYOUTS[layout]

        def call(
            t: Target, rowwise: bool = rowwise, fa: str = fa, fb: str = fb, am: str = am,
            bm: str = bm,
        ) -> object:  # fmt: skip
            a_scale = torch.empty((M,) if rowwise else (), dtype=FP32, device="meta")
            b_scale = torch.empty((N,) if rowwise else (), dtype=FP32, device="meta")
            a, b = _mat(M, K, _fp8(t, fa), am), _mat(N, K, _fp8(t, fb), bm)
            return gemm_fp8_kernel.gemm_fp8_scaled_triton(a, a_scale, b, b_scale, BF16, rowwise)

        gran = "rowwise" if rowwise else "tensorwise"
        name = f"gemm_fp8-{gran}-{fa}x{fb}-{layout}"
        yield Case(name, gemm_fp8_kernel, "_gemm_fp8_scaled_kernel", call)

    def fp16_out(t: Target) -> object:
        s = torch.empty((), dtype=FP32, device="meta")
        a, b = _mat(M, K, t.e4m3), _mat(N, K, t.e4m3)
        return gemm_fp8_kernel.gemm_fp8_scaled_triton(a, s, b, s, FP16, False)

    yield Case("gemm_fp8-tensorwise-fp16out", gemm_fp8_kernel, "_gemm_fp8_scaled_kernel", fp16_out)

    # blockwise (1 x 128 / 128 x 128 scales) and mxfp8 (1 x 32 along K, b per row), as
    # gemm_fp8_impl._scale_blocks passes them; the torch quantiser makes them K-major.
    for gran, block_k, b_block_n in (("blockwise", 128, 128), ("mxfp8", 32, 1)):
        for fa, fb in (("e4m3", "e4m3"), ("e5m2", "e5m2"), ("e5m2", "e4m3")):

            def call_blocks(
                t: Target, fa: str = fa, fb: str = fb, block_k: int = block_k,
                b_block_n: int = b_block_n,
            ) -> object:  # fmt: skip
                kb = -(-K // block_k)
                a_scale, b_scale = _mat(M, kb, FP32), _mat(-(-N // b_block_n), kb, FP32)
                a, b = _mat(M, K, _fp8(t, fa)), _mat(N, K, _fp8(t, fb))
                return gemm_fp8_kernel.gemm_fp8_blockwise_triton(
                    a, a_scale, b, b_scale, BF16, block_k, b_block_n
                )

            name = f"gemm_fp8-{gran}-{fa}x{fb}"
            yield Case(name, gemm_fp8_kernel, "_gemm_fp8_blockwise_kernel", call_blocks)


def _quantize_cases() -> Iterator[Case]:
    # tensorwise: _quant_tensor_kernel; rowwise (GROUP = N, a power of two or not) and
    # blockwise (GROUP = 128): _quant_groups_kernel.
    widths = {"tensorwise": [4096], "rowwise": [4096, 300], "blockwise": [4096]}
    for gran, ns in widths.items():
        kernel = "_quant_tensor_kernel" if gran == "tensorwise" else "_quant_groups_kernel"
        for n in ns:
            for xdtype, fmt in ((BF16, "e4m3"), (BF16, "e5m2"), (FP16, "e4m3")):

                def call(
                    t: Target, gran: str = gran, n: int = n, xdtype: torch.dtype = xdtype,
                    fmt: str = fmt,
                ) -> object:  # fmt: skip
                    x = _mat(M, n, xdtype)
                    return quantize_kernel.quantize_fp8_triton(x, _fp8(t, fmt), gran, 128)

                name = f"quantize-{gran}-n{n}-{_name(xdtype)}-{fmt}"
                yield Case(name, quantize_kernel, kernel, call)


def _attention_cases() -> Iterator[Case]:
    batch, seq, heads = 2, 4096, 32
    variants = [(BF16, d, causal, 8) for d in (64, 128) for causal in (False, True)]
    variants += [(BF16, 128, True, heads)]  # MHA: GROUP = 1, specialised to a constexpr
    variants += [(FP16, 128, causal, 8) for causal in (False, True)]
    for dtype, d, causal, kv_heads in variants:

        def call(
            t: Target, dtype: torch.dtype = dtype, d: int = d, causal: bool = causal,
            kv_heads: int = kv_heads,
        ) -> object:  # fmt: skip
            q = torch.empty(batch, seq, heads, d, dtype=dtype, device="meta")
            kv = torch.empty(batch, seq, kv_heads, d, dtype=dtype, device="meta")
            return attention_kernel.flash_attn_fwd_triton(q, kv, kv, causal, d**-0.5)

        mode = "causal" if causal else "full"
        attn = "mha" if kv_heads == heads else "gqa"
        name = f"attention-{_name(dtype)}-d{d}-{mode}-{attn}"
        yield Case(name, attention_kernel, "_attn_fwd_kernel", call)


def _grouped_cases() -> Iterator[Case]:
    # b_nk (G, N, K): trans_b=True passes b (G, N, K) itself ("NT"); trans_b=False passes
    # b (G, K, N) transposed ("NN"), as does grad_a with trans_b=True.  G == 1 is a constexpr.
    variants = [(BF16, "NT", 8), (BF16, "NN", 8), (FP16, "NT", 8), (BF16, "NT", 1)]
    for dtype, layout, groups in variants:

        def call(
            t: Target, dtype: torch.dtype = dtype, layout: str = layout, groups: int = groups
        ) -> object:
            offs = torch.empty(groups + 1, dtype=torch.int64, device="meta")
            if layout == "NT":
                b = torch.empty(groups, N, K, dtype=dtype, device="meta")
            else:
                b = torch.empty(groups, K, N, dtype=dtype, device="meta").transpose(1, 2)
            return grouped_gemm_kernel.grouped_gemm_triton(_mat(M, K, dtype), b, offs, dtype)

        name = f"grouped_gemm-{_name(dtype)}-{layout}-{groups}groups"
        yield Case(name, grouped_gemm_kernel, "_grouped_fwd_kernel", call)

    for dtype in (BF16, FP16):

        def wgrad(t: Target, dtype: torch.dtype = dtype) -> object:
            offs = torch.empty(9, dtype=torch.int64, device="meta")
            x, y = _mat(M, N, dtype), _mat(M, K, dtype)
            return grouped_gemm_kernel.grouped_gemm_variable_k_triton(x, y, offs, dtype)

        name = f"grouped_gemm_wgrad-{_name(dtype)}"
        yield Case(name, grouped_gemm_kernel, "_grouped_wgrad_kernel", wgrad)


CASES = [
    *_gemm_cases(),
    *_gemm_fp8_cases(),
    *_quantize_cases(),
    *_attention_cases(),
    *_grouped_cases(),
]


def _short(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


def _params() -> Iterator[Any]:
    for case in CASES:
        for name in TARGETS:
            yield pytest.param(case, name, id=f"{case.id}-{name}")


class _Recorder:
    """Stands in for a JITFunction: ``kernel[grid](*args, **kwargs)`` records the launch."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.launches: list[tuple[tuple[Any, ...], dict[str, Any]]] = []

    def __getitem__(self, grid: object) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.launches.append((args, kwargs))

        return launch


def _specialise(
    fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], target: Target
) -> tuple[dict[str, str], dict[str, Any], dict[tuple[int, ...], Any], dict[str, Any]]:
    """signature, constexprs, attrs and options of a launch, as Triton's JIT makes them."""
    names: list[str] = list(fn.arg_names)
    bound = dict(zip(names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    assert set(bound) == set(names), f"launch lacks {sorted(set(names) - set(bound))}"
    options = {k: v for k, v in kwargs.items() if k not in names}
    divisible = [["tt.divisibility", 16]]
    pointer = divisible  # torch allocations are 16-byte aligned
    if target.backend == "hip" and triton.knobs.amd.use_buffer_ops:
        pointer = [*divisible, ["tt.pointer_range", 32]]  # every tensor here is under 2 GiB
    signature: dict[str, str] = {}
    constexprs: dict[str, Any] = {}
    attrs: dict[tuple[int, ...], Any] = {}
    for i, param in enumerate(fn.params):
        value = bound[param.name]
        specialise = not getattr(param, "do_not_specialize", False)
        if param.is_constexpr or (type(value) is int and value == 1 and specialise):
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = "*" + TRITON_DTYPES[value.dtype]
            attrs[(i,)] = pointer
        elif type(value) is int:
            signature[param.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0 and specialise:
                attrs[(i,)] = divisible
        elif type(value) is float:
            signature[param.name] = "fp32"
        else:
            raise TypeError(f"{param.name}: no rule for {type(value).__name__} {value!r}")
    return signature, constexprs, attrs, options


@pytest.fixture(scope="module", autouse=True)
def _fresh_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Compile for real on every run: a private, empty Triton cache for this module."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRITON_CACHE_DIR", str(tmp_path_factory.mktemp("triton-cache")))
        yield


@pytest.mark.parametrize(("case", "target_name"), list(_params()))
def test_compile(case: Case, target_name: str) -> None:
    target = TARGETS[target_name]
    recorder = _Recorder(getattr(case.module, case.kernel))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(arch, "gpu_arch", lambda: target_name)
        mp.setattr(case.module, case.kernel, recorder)
        case.call(target)
    assert len(recorder.launches) == 1, f"expected one launch of {case.kernel}"
    signature, constexprs, attrs, options = _specialise(recorder.fn, *recorder.launches[0], target)
    src = ASTSource(recorder.fn, signature, constexprs=constexprs, attrs=attrs)
    gpu = GPUTarget(target.backend, target.arch, target.warp_size)
    compiled = triton.compile(src, target=gpu, options=options)
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
