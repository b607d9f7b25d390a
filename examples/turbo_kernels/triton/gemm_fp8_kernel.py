"""FP8 GEMM Triton kernels: ``c = dequant(a) @ dequant(b).T``, a (M, K), b (N, K) in FP8.

The element type comes from the torch tensors: torch.float8_e4m3fn -> tl.float8e4nv
(NVIDIA, gfx950), torch.float8_e4m3fnuz -> tl.float8e4b8 (MI300 / gfx942), and likewise
float8_e5m2 -> tl.float8e5, float8_e5m2fnuz -> tl.float8e5b16 (see
``turbo_kernels.pytorch.core.low_precision.float8_e4m3``). Accumulation is float32.

* tensorwise / rowwise (``_gemm_fp8_scaled_kernel``): plain FP8 K loop, scales applied
  once in the epilogue (scalar, or a[M] x b[N] outer product);
* blockwise / mxfp8 (``_gemm_fp8_blockwise_kernel``): the scales change along K, so each
  K block's partial product is scaled before it is added (SCALE_BLOCK_K = 128 for
  blockwise with 1x128 activation and 128x128 weight blocks; 32 with per-row b scales
  for mxfp8). BLOCK_K must divide SCALE_BLOCK_K.

No autotuning: ``GEMM_CONFIG`` is the launch configuration (H200 defaults; at most two
pipeline stages on MI300, ``turbo_kernels.triton.arch``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from turbo_kernels.triton.arch import launch_config
from turbo_kernels.triton.gemm_kernel import _tile_ids

__all__ = ["GEMM_CONFIG", "gemm_fp8_blockwise_triton", "gemm_fp8_scaled_triton"]

GEMM_CONFIG: dict[str, int] = {
    "BLOCK_M": 128,
    "BLOCK_N": 128,
    "BLOCK_K": 128,
    "GROUP_M": 8,
    "num_warps": 8,
    "num_stages": 3,
}


@triton.jit
def _gemm_fp8_scaled_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    ROWWISE: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m < M
    mask_n = offs_n < N

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = offs_k < K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if ROWWISE:
        a_s = tl.load(a_scale_ptr + offs_m, mask=mask_m, other=0.0)
        b_s = tl.load(b_scale_ptr + offs_n, mask=mask_n, other=0.0)
        acc = acc * a_s[:, None] * b_s[None, :]
    else:
        acc = acc * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _gemm_fp8_blockwise_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_scale_ptr,
    b_scale_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    stride_asm,
    stride_ask,
    stride_bsn,
    stride_bsk,
    SCALE_BLOCK_K: tl.constexpr,
    B_SCALE_BLOCK_N: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid_m, pid_n = _tile_ids(M, N, BLOCK_M, BLOCK_N, GROUP_M)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    mask_m = offs_m < M
    mask_n = offs_n < N
    # Scale rows of this tile: a has one per row, b one per B_SCALE_BLOCK_N rows of b.
    a_s_ptrs = a_scale_ptr + offs_m * stride_asm
    b_s_ptrs = b_scale_ptr + (offs_n // B_SCALE_BLOCK_N) * stride_bsn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kt in range(0, tl.cdiv(K, BLOCK_K)):
        mask_k = offs_k < K - kt * BLOCK_K
        a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
        ks = (kt * BLOCK_K) // SCALE_BLOCK_K
        a_s = tl.load(a_s_ptrs + ks * stride_ask, mask=mask_m, other=0.0)
        b_s = tl.load(b_s_ptrs + ks * stride_bsk, mask=mask_n, other=0.0)
        acc += tl.dot(a, b) * (a_s[:, None] * b_s[None, :])
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


def _check_shapes(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int, int]:
    m, k = a.shape
    n, k_b = b.shape
    if k != k_b:
        raise ValueError(f"K mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}")
    return m, n, k


def gemm_fp8_scaled_triton(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
    rowwise: bool,
) -> torch.Tensor:
    """Tensorwise (scales of shape ()) or rowwise (a_scale_inv (M,), b_scale_inv (N,))."""
    m, n, k = _check_shapes(a, b)
    cfg = launch_config(GEMM_CONFIG)
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _gemm_fp8_scaled_kernel[grid](
        a, b, c, a_scale_inv.contiguous(), b_scale_inv.contiguous(), m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        ROWWISE=rowwise,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        GROUP_M=cfg["GROUP_M"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def gemm_fp8_blockwise_triton(
    a: torch.Tensor,
    a_scale_inv: torch.Tensor,
    b: torch.Tensor,
    b_scale_inv: torch.Tensor,
    out_dtype: torch.dtype,
    block_k: int = 128,
    b_block_n: int = 128,
) -> torch.Tensor:
    """a_scale_inv (M, ceil(K/block_k)); b_scale_inv (ceil(N/b_block_n), ceil(K/block_k))."""
    m, n, k = _check_shapes(a, b)
    cfg = launch_config(GEMM_CONFIG)
    tile_k = min(cfg["BLOCK_K"], block_k)
    if block_k % tile_k:
        raise ValueError(f"BLOCK_K {tile_k} must divide the scale block {block_k}")
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) * triton.cdiv(n, cfg["BLOCK_N"]),)
    _gemm_fp8_blockwise_kernel[grid](
        a, b, c, a_scale_inv, b_scale_inv, m, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        a_scale_inv.stride(0), a_scale_inv.stride(1),
        b_scale_inv.stride(0), b_scale_inv.stride(1),
        SCALE_BLOCK_K=block_k, B_SCALE_BLOCK_N=b_block_n,
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=tile_k,
        GROUP_M=cfg["GROUP_M"], num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c
