"""The example package's Triton launches (``turbo_kernels``): one ``Case`` per way a real
wrapper launches a kernel (``gemm_triton``, ``quantize_fp8_triton``, ...), called on meta
tensors with the kernel replaced by a ``Recorder``.  ``examples/tests/test_triton_compile.py``
compiles every case for sm90, gfx942 and gfx950; a campaign's kernel facts compile the
first case of each kernel of its kernel files (``runner.worker.analyze.compile_main``).

FP8 tensors take the target's types, as ``turbo_kernels.pytorch.core.low_precision``
picks them: float8_e4m3fn / float8_e5m2 (tl.float8e4nv / tl.float8e5) on sm90 and
gfx950, the fnuz variants (tl.float8e4b8 / tl.float8e5b16) on gfx942.  The configs are
the wrappers' config dicts (``GEMM_CONFIG``, ...), adapted by the wrapper to the GPU it
launches on (``turbo_kernels.triton.arch.launch_config``); each case records its launch
with ``gpu_arch()`` answering the target's name, so what compiles is what the wrapper
would launch there.  Imported only where the measured tree is on ``sys.path``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType

import torch
from turbo_kernels.triton import (
    arch,
    attention_kernel,
    gemm_fp8_kernel,
    gemm_kernel,
    grouped_gemm_kernel,
    quantize_kernel,
)

from runner.worker.analyze.launches import TRITON_DTYPES, JitKernel, Launch, Recorder, Target

__all__ = ["CASES", "DEVICE_FUNCTIONS", "MODULES", "Case", "record"]

MODULES = (attention_kernel, gemm_fp8_kernel, gemm_kernel, grouped_gemm_kernel, quantize_kernel)
DEVICE_FUNCTIONS = {"gemm_kernel._tile_ids"}  # @triton.jit helpers called by kernels, not launched

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32


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
    scaled = [
        (False, fa, fb, layout)
        for fa, fb in (("e4m3", "e4m3"), ("e5m2", "e4m3"))
        for layout in ("NT", "NN", "TN")
    ]
    scaled += [(False, "e5m2", "e5m2", "NT"), (True, "e4m3", "e4m3", "NT")]
    scaled += [(True, "e5m2", "e5m2", "NN"), (True, "e5m2", "e4m3", "TN")]
    for rowwise, fa, fb, layout in scaled:
        am, bm = LAYOUTS[layout]

        def call(
            t: Target,
            rowwise: bool = rowwise,
            fa: str = fa,
            fb: str = fb,
            am: str = am,
            bm: str = bm,
        ) -> object:
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
                t: Target,
                fa: str = fa,
                fb: str = fb,
                block_k: int = block_k,
                b_block_n: int = b_block_n,
            ) -> object:
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
                    t: Target,
                    gran: str = gran,
                    n: int = n,
                    xdtype: torch.dtype = xdtype,
                    fmt: str = fmt,
                ) -> object:
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
            t: Target,
            dtype: torch.dtype = dtype,
            d: int = d,
            causal: bool = causal,
            kv_heads: int = kv_heads,
        ) -> object:
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


def record(case: Case, target_name: str, target: Target) -> tuple[JitKernel, Launch]:
    """The kernel of ``case`` and the one launch its wrapper makes for ``target_name``."""
    recorder = Recorder(getattr(case.module, case.kernel))
    saved = arch.gpu_arch
    arch.gpu_arch = lambda: target_name
    setattr(case.module, case.kernel, recorder)
    try:
        case.call(target)
    finally:
        setattr(case.module, case.kernel, recorder.fn)
        arch.gpu_arch = saved
    if len(recorder.launches) != 1:
        raise RuntimeError(f"expected one launch of {case.kernel}, got {len(recorder.launches)}")
    return recorder.fn, recorder.launches[0]
