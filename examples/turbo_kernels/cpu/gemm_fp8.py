"""FP8 GEMM, torch backend: ``out = dequant(a) @ dequant(b).T``, a (M, K), b (N, K) in FP8.

Each function mirrors how the matching GPU kernel works, so that a change here means
what it would mean in the kernel: tensorwise and rowwise apply the scales in the
epilogue, blockwise accumulates one partial product per K block with that block's
scales (see ``turbo_kernels/triton/gemm_fp8_kernel.py``). Scale shapes: see
``turbo_kernels.pytorch.kernels.quantization``.
"""

from __future__ import annotations

import torch

__all__ = [
    "ACCUM_DTYPE",
    "gemm_fp8_blockwise_torch",
    "gemm_fp8_rowwise_torch",
    "gemm_fp8_tensorwise_torch",
]

# Tunable: dtype of the dequantised operands and of the accumulator.
ACCUM_DTYPE = torch.float32


def gemm_fp8_tensorwise_torch(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    acc = a.to(ACCUM_DTYPE) @ b.to(ACCUM_DTYPE).t()
    return (acc * (a_scale_inv * b_scale_inv)).to(out_dtype)


def gemm_fp8_rowwise_torch(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    acc = a.to(ACCUM_DTYPE) @ b.to(ACCUM_DTYPE).t()
    return (acc * a_scale_inv[:, None] * b_scale_inv[None, :]).to(out_dtype)


def gemm_fp8_blockwise_torch(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
    block_k: int = 128,
    b_block_n: int = 128,
) -> torch.Tensor:
    """a_scale_inv (M, ceil(K/block_k)); b_scale_inv (ceil(N/b_block_n), ceil(K/block_k)).

    BLOCKWISE: block_k = b_block_n = block size (1 x 128 and 128 x 128 blocks);
    MX_BLOCKWISE: block_k = 32, b_block_n = 1.
    """
    m, k = a.shape
    n = b.shape[0]
    b_scale_rows = b_scale_inv.repeat_interleave(b_block_n, dim=0)[:n]  # (N, K blocks)
    acc = torch.zeros(m, n, dtype=ACCUM_DTYPE, device=a.device)
    for kb, k0 in enumerate(range(0, k, block_k)):
        a_tile = a[:, k0 : k0 + block_k].to(ACCUM_DTYPE)
        b_tile = b[:, k0 : k0 + block_k].to(ACCUM_DTYPE)
        scale = a_scale_inv[:, kb, None] * b_scale_rows[None, :, kb]  # (M, N)
        acc += (a_tile @ b_tile.t()) * scale
    return acc.to(out_dtype)
