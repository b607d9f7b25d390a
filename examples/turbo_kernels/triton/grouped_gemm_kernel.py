"""BF16 grouped GEMM Triton kernels, one launch over every group.

``grouped_gemm_triton``: out[rows of g] = a[rows of g] @ b[g].T, a (M, K), b (G, N, K).
``grouped_gemm_variable_k_triton``: out[g] = x[rows of g].T @ y[rows of g] (the weight
gradient), x (M, N), y (M, K) -> (G, N, K).

The group boundaries are read by the kernel from ``group_offs`` (G + 1 int64, a device
tensor) at run time: nothing assumes equal or non-empty groups.  The forward grid has
``cdiv(M, BLOCK_M) + G`` row tiles (an upper bound: each group adds at most one partial
tile); each program walks the offsets to find its group and exits when it has none.
No autotuning: ``GROUPED_GEMM_CONFIG`` is the launch configuration.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["GROUPED_GEMM_CONFIG", "grouped_gemm_triton", "grouped_gemm_variable_k_triton"]

GROUPED_GEMM_CONFIG: dict[str, int] = {
    "BLOCK_M": 64,
    "BLOCK_N": 128,
    "BLOCK_K": 64,
    "num_warps": 4,
    "num_stages": 3,
}


@triton.jit
def _grouped_fwd_kernel(
    a_ptr, b_ptr, c_ptr, offs_ptr,
    G, N, K,
    stride_am, stride_ak, stride_bg, stride_bn, stride_bk, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    tile = tl.program_id(0)
    pid_n = tl.program_id(1)
    # find the group holding row tile `tile` (tiles counted group after group)
    # loop-carried values keep one type: group ids int32, row offsets int64 (group_offs)
    group = tl.full((), -1, tl.int32)
    row0 = tl.zeros((), tl.int64)
    rows = tl.zeros((), tl.int64)
    seen = tl.zeros((), tl.int64)
    for g in range(0, G):
        lo = tl.load(offs_ptr + g)
        hi = tl.load(offs_ptr + g + 1)
        n_tiles = tl.cdiv(hi - lo, BLOCK_M)
        hit = (group < 0) & (tile < seen + n_tiles)
        group = tl.where(hit, g, group)
        row0 = tl.where(hit, lo + (tile - seen) * BLOCK_M, row0)
        rows = tl.where(hit, hi, rows)
        seen += n_tiles
    if group >= 0:
        offs_m = row0 + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        offs_k = tl.arange(0, BLOCK_K)
        mask_m = offs_m < rows
        mask_n = offs_n < N
        a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
        b_ptrs = (b_ptr + group.to(tl.int64) * stride_bg + offs_k[:, None] * stride_bk
                  + offs_n[None, :] * stride_bn)  # fmt: skip
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kt in range(0, tl.cdiv(K, BLOCK_K)):
            mask_k = offs_k < K - kt * BLOCK_K
            a = tl.load(a_ptrs, mask=mask_m[:, None] & mask_k[None, :], other=0.0)
            b = tl.load(b_ptrs, mask=mask_k[:, None] & mask_n[None, :], other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BLOCK_K * stride_ak
            b_ptrs += BLOCK_K * stride_bk
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _grouped_wgrad_kernel(
    x_ptr, y_ptr, c_ptr, offs_ptr,
    N, K,
    stride_xm, stride_xn, stride_ym, stride_yk, stride_cg, stride_cn, stride_ck,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):  # fmt: skip
    group = tl.program_id(0)
    pid = tl.program_id(1)
    num_k = tl.cdiv(K, BLOCK_K)
    pid_n = pid // num_k
    pid_k = pid % num_k
    lo = tl.load(offs_ptr + group)
    hi = tl.load(offs_ptr + group + 1)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    mask_n = offs_n < N
    mask_k = offs_k < K
    acc = tl.zeros((BLOCK_N, BLOCK_K), dtype=tl.float32)
    for m0 in range(lo, hi, BLOCK_M):
        offs_m = m0 + tl.arange(0, BLOCK_M)
        mask_m = offs_m < hi
        xt = tl.load(x_ptr + offs_m[None, :] * stride_xm + offs_n[:, None] * stride_xn,
                     mask=mask_n[:, None] & mask_m[None, :], other=0.0)  # fmt: skip
        y = tl.load(y_ptr + offs_m[:, None] * stride_ym + offs_k[None, :] * stride_yk,
                    mask=mask_m[:, None] & mask_k[None, :], other=0.0)  # fmt: skip
        acc = tl.dot(xt, y, acc)
    c_ptrs = (c_ptr + group.to(tl.int64) * stride_cg + offs_n[:, None] * stride_cn
              + offs_k[None, :] * stride_ck)  # fmt: skip
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_n[:, None] & mask_k[None, :])


def grouped_gemm_triton(
    a: torch.Tensor, b: torch.Tensor, group_offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """a (M, K), b (G, N, K) any strides, group_offs (G + 1,) int64 -> (M, N)."""
    m, k = a.shape
    g, n, k_b = b.shape
    if k != k_b:
        raise ValueError(f"K mismatch: a {tuple(a.shape)}, b {tuple(b.shape)}")
    cfg = GROUPED_GEMM_CONFIG
    c = torch.empty((m, n), dtype=out_dtype, device=a.device)
    if m == 0:
        return c
    grid = (triton.cdiv(m, cfg["BLOCK_M"]) + g, triton.cdiv(n, cfg["BLOCK_N"]))
    _grouped_fwd_kernel[grid](
        a, b, c, group_offs, g, n, k,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), b.stride(2),
        c.stride(0), c.stride(1),
        BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"], BLOCK_K=cfg["BLOCK_K"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c


def grouped_gemm_variable_k_triton(
    x: torch.Tensor, y: torch.Tensor, group_offs: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """x (M, N), y (M, K), group_offs (G + 1,) -> (G, N, K); empty groups give zeros."""
    _, n = x.shape
    _, k = y.shape
    g = group_offs.shape[0] - 1
    cfg = GROUPED_GEMM_CONFIG
    c = torch.empty((g, n, k), dtype=out_dtype, device=x.device)
    block_n, block_k = 64, 64
    grid = (g, triton.cdiv(n, block_n) * triton.cdiv(k, block_k))
    _grouped_wgrad_kernel[grid](
        x, y, c, group_offs, n, k,
        x.stride(0), x.stride(1), y.stride(0), y.stride(1),
        c.stride(0), c.stride(1), c.stride(2),
        BLOCK_M=cfg["BLOCK_K"], BLOCK_N=block_n, BLOCK_K=block_k,
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return c
