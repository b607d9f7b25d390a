"""BF16 GEMM, torch backend: ``out = a @ b.T`` with a (M, K), b (N, K), float32 accumulation."""

from __future__ import annotations

import torch

__all__ = ["gemm_torch"]


def gemm_torch(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return torch.matmul(a.float(), b.float().t()).to(out_dtype)
