"""Dispatch of the grouped GEMM kernels to a backend (``TURBO_KERNELS_GROUPED_GEMM_BACKEND``).

TRITON: one launch over every group (turbo_kernels/triton/grouped_gemm_kernel.py), the
group offsets read by the kernel from a device tensor; TORCH: a loop over the groups.
"""

from __future__ import annotations

import torch

from turbo_kernels.cpu.grouped_gemm import grouped_gemm_torch, grouped_gemm_variable_k_torch
from turbo_kernels.pytorch.kernels.backend import (
    GROUPED_GEMM_BACKEND_ENV,
    BackendType,
    PrecisionType,
    get_backend,
)
from turbo_kernels.pytorch.kernels.gemm_impl import _require_gpu_tensors

__all__ = ["grouped_gemm_compute_offs", "grouped_gemm_impl", "grouped_gemm_variable_k_impl"]


def grouped_gemm_compute_offs(group_lens: torch.Tensor) -> torch.Tensor:
    """Exclusive prefix sum of ``group_lens``: (G + 1,) int64, offs[0] = 0."""
    offs = torch.zeros(group_lens.shape[0] + 1, dtype=torch.int64, device=group_lens.device)
    torch.cumsum(group_lens.to(torch.int64), dim=0, out=offs[1:])
    return offs


def _triton(a: torch.Tensor) -> bool:
    return get_backend(GROUPED_GEMM_BACKEND_ENV, PrecisionType.OTHER, a.device) is (
        BackendType.TRITON
    )


def grouped_gemm_impl(
    a: torch.Tensor,
    b: torch.Tensor,
    group_lens: torch.Tensor,
    group_offs: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """out[rows of g] = a[rows of g] @ b[g].T; a (M, K), b (G, N, K) (any strides)."""
    if _triton(a):
        from turbo_kernels.triton.grouped_gemm_kernel import grouped_gemm_triton

        _require_gpu_tensors(a, b, group_offs)
        return grouped_gemm_triton(a, b, group_offs, out_dtype)
    return grouped_gemm_torch(a, b, group_lens, out_dtype)


def grouped_gemm_variable_k_impl(
    x: torch.Tensor,
    y: torch.Tensor,
    group_lens: torch.Tensor,
    group_offs: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """out[g] = x[rows of g].T @ y[rows of g]; x (M, N), y (M, K) -> (G, N, K)."""
    if _triton(x):
        from turbo_kernels.triton.grouped_gemm_kernel import grouped_gemm_variable_k_triton

        _require_gpu_tensors(x, y, group_offs)
        return grouped_gemm_variable_k_triton(x, y, group_offs, out_dtype)
    return grouped_gemm_variable_k_torch(x, y, group_lens, out_dtype)
