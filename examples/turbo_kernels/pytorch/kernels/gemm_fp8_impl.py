"""Dispatch of the FP8 GEMM kernels (``dequant(a) @ dequant(b).T``) to a backend.

Inputs are already quantised: a (M, K) and b (N, K) in FP8 with their ``scale_inv``
(shapes in ``turbo_kernels.pytorch.kernels.quantization``).
"""

from __future__ import annotations

import torch

from turbo_kernels.cpu import gemm_fp8 as torch_fp8
from turbo_kernels.pytorch.core.low_precision import MX_BLOCK_SIZE, ScalingGranularity
from turbo_kernels.pytorch.kernels.backend import BackendType, PrecisionType, get_gemm_backend
from turbo_kernels.pytorch.kernels.gemm_impl import _require_gpu_tensors

__all__ = ["gemm_fp8_impl"]


def gemm_fp8_impl(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    granularity: ScalingGranularity,
    out_dtype: torch.dtype,
    block_size: int | None = None,
) -> torch.Tensor:
    if get_gemm_backend(PrecisionType.FP8, a.device) is BackendType.TRITON:
        from turbo_kernels.triton import gemm_fp8_kernel as tk  # lazy: imports triton

        _require_gpu_tensors(a, b)
        if granularity in (ScalingGranularity.TENSORWISE, ScalingGranularity.ROWWISE):
            rowwise = granularity is ScalingGranularity.ROWWISE
            return tk.gemm_fp8_scaled_triton(a, a_scale_inv, b, b_scale_inv, out_dtype, rowwise)
        block_k, b_block_n = _scale_blocks(granularity, block_size)
        return tk.gemm_fp8_blockwise_triton(
            a, a_scale_inv, b, b_scale_inv, out_dtype, block_k, b_block_n
        )

    if granularity is ScalingGranularity.TENSORWISE:
        return torch_fp8.gemm_fp8_tensorwise_torch(a, a_scale_inv, b, b_scale_inv, out_dtype)
    if granularity is ScalingGranularity.ROWWISE:
        return torch_fp8.gemm_fp8_rowwise_torch(a, a_scale_inv, b, b_scale_inv, out_dtype)
    block_k, b_block_n = _scale_blocks(granularity, block_size)
    return torch_fp8.gemm_fp8_blockwise_torch(
        a, a_scale_inv, b, b_scale_inv, out_dtype, block_k, b_block_n
    )


def _scale_blocks(granularity: ScalingGranularity, block_size: int | None) -> tuple[int, int]:
    """(K block of both operands, N block of b's scales) for the block-scaled kernels."""
    if granularity is ScalingGranularity.MX_BLOCKWISE:
        return MX_BLOCK_SIZE, 1  # 1 x 32 along K for both operands
    if block_size is None:
        raise ValueError("BLOCKWISE needs a block_size")
    return block_size, block_size  # a: 1 x bs, b: bs x bs
