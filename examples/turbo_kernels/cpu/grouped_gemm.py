"""Grouped GEMM, torch backend: a loop over the groups, float32 accumulation.

``group_lens`` is a runtime int64 tensor (rows per group, any sizes, zeros allowed);
its values are read on the host, group by group.  Layouts: a (M, K) rows sorted by
group, b (G, N, K); the variable-K form (the weight gradient) reduces over each
group's rows.
"""

from __future__ import annotations

import torch

__all__ = ["grouped_gemm_torch", "grouped_gemm_variable_k_torch"]


def _bounds(group_lens: torch.Tensor) -> list[tuple[int, int]]:
    starts, out = 0, []
    for rows in group_lens.tolist():
        out.append((starts, starts + int(rows)))
        starts += int(rows)
    return out


def grouped_gemm_torch(
    a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[rows of g] = a[rows of g] @ b[g].T with a (M, K), b (G, N, K) -> (M, N)."""
    out = torch.empty(a.shape[0], b.shape[1], dtype=out_dtype, device=a.device)
    for g, (lo, hi) in enumerate(_bounds(group_lens)):
        if hi > lo:
            out[lo:hi] = (a[lo:hi].float() @ b[g].float().t()).to(out_dtype)
    return out


def grouped_gemm_variable_k_torch(
    x: torch.Tensor, y: torch.Tensor, group_lens: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    """out[g] = x[rows of g].T @ y[rows of g] with x (M, N), y (M, K) -> (G, N, K);
    an empty group gives zeros."""
    g_count = group_lens.shape[0]
    out = torch.zeros(g_count, x.shape[1], y.shape[1], dtype=out_dtype, device=x.device)
    for g, (lo, hi) in enumerate(_bounds(group_lens)):
        if hi > lo:
            out[g] = (x[lo:hi].float().t() @ y[lo:hi].float()).to(out_dtype)
    return out
