"""FP8 quantisation op, named as Primus-Turbo's ``ops.quantize_fp8`` / ``ops.dequantize_fp8``.

``quantize_fp8(x, out_dtype, granularity, block_size=None, weight=False, *, axis=None)``
returns ``(x_fp8, scale_inv)`` (see ``turbo_kernels.pytorch.kernels.quantization`` for the
scale shapes).  Scales run along the last dim: ``axis`` may be None, -1 or 1 (the only
direction implemented).  Backend: ``TURBO_KERNELS_QUANTIZE_BACKEND`` (TRITON on a GPU:
turbo_kernels/triton/quantize_kernel.py, activations only; TORCH: plain torch ops).
The FP8 GEMMs keep quantising through the torch path.
"""

from __future__ import annotations

import torch

from turbo_kernels.pytorch.core.low_precision import ScalingGranularity
from turbo_kernels.pytorch.kernels.backend import (
    QUANTIZE_BACKEND_ENV,
    BackendType,
    PrecisionType,
    get_backend,
)
from turbo_kernels.pytorch.kernels.quantization import dequantize_fp8
from turbo_kernels.pytorch.kernels.quantization import quantize_fp8 as quantize_fp8_torch

__all__ = ["dequantize_fp8", "quantize_fp8"]

_TRITON_GRANULARITIES = (
    ScalingGranularity.TENSORWISE,
    ScalingGranularity.ROWWISE,
    ScalingGranularity.BLOCKWISE,
)


def quantize_fp8(
    x: torch.Tensor,
    out_dtype: torch.dtype,
    granularity: ScalingGranularity,
    block_size: int | None = None,
    weight: bool = False,
    *,
    axis: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a 2-D tensor to ``out_dtype``; returns ``(x_fp8, scale_inv)``."""
    if axis not in (None, -1, 1):
        raise NotImplementedError(f"scales along axis {axis}: only the last dim is supported")
    backend = get_backend(QUANTIZE_BACKEND_ENV, PrecisionType.FP8, x.device)
    if backend is BackendType.TRITON and not weight and granularity in _TRITON_GRANULARITIES:
        from turbo_kernels.triton.quantize_kernel import quantize_fp8_triton

        return quantize_fp8_triton(x, out_dtype, granularity.value, block_size)
    return quantize_fp8_torch(x, out_dtype, granularity, block_size, weight)
