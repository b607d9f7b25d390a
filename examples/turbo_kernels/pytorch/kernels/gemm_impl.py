"""Dispatch of the BF16 GEMM kernel (``a @ b.T``, a (M, K), b (N, K)) to a backend."""

from __future__ import annotations

import torch

from turbo_kernels.cpu.gemm import gemm_torch
from turbo_kernels.pytorch.kernels.backend import BackendType, PrecisionType, get_gemm_backend

__all__ = ["gemm_impl"]


def gemm_impl(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    backend = get_gemm_backend(PrecisionType.OTHER, a.device)
    if backend is BackendType.TRITON:
        from turbo_kernels.triton.gemm_kernel import gemm_triton  # lazy: imports triton

        _require_gpu_tensors(a, b)
        return gemm_triton(a, b, out_dtype)
    return gemm_torch(a, b, out_dtype)


def _require_gpu_tensors(*tensors: torch.Tensor) -> None:
    for t in tensors:
        if t.device.type != "cuda":
            raise ValueError(f"TRITON backend needs GPU tensors, got one on {t.device}")
