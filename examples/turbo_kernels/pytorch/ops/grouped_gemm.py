"""Grouped GEMM op (MoE experts), named as Primus-Turbo's:
``grouped_gemm(a, b, group_lens, group_offs=None, trans_b=False, num_cu=None)``.

a (sum(group_lens), K) rows sorted by group; b (G, K, N), or (G, N, K) with
``trans_b=True``; ``group_lens`` the rows per group as an int64 tensor (runtime values:
any sizes, zeros allowed).  Returns (sum(group_lens), N); differentiable in a and b.
"""

from __future__ import annotations

from typing import Any

import torch

from turbo_kernels.pytorch.kernels.grouped_gemm_impl import (
    grouped_gemm_compute_offs,
    grouped_gemm_impl,
    grouped_gemm_variable_k_impl,
)

__all__ = ["check_grouped_args", "grouped_gemm"]


def check_grouped_args(a: torch.Tensor, b: torch.Tensor, group_lens: torch.Tensor) -> None:
    if a.dim() != 2 or b.dim() != 3:
        raise ValueError(f"expected a 2-D and b 3-D, got {tuple(a.shape)} and {tuple(b.shape)}")
    if group_lens.dim() != 1 or group_lens.shape[0] != b.shape[0]:
        raise ValueError(f"group_lens {tuple(group_lens.shape)} does not match {b.shape[0]} groups")
    if group_lens.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"group_lens must be an integer tensor, got {group_lens.dtype}")


class GroupedGemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        group_lens: torch.Tensor,
        group_offs: torch.Tensor,
        trans_b: bool,
    ) -> torch.Tensor:
        b_nk = b if trans_b else b.transpose(1, 2)  # (G, N, K) view
        ctx.save_for_backward(a, b, group_lens, group_offs)
        ctx.trans_b = trans_b
        return grouped_gemm_impl(a, b_nk, group_lens, group_offs, a.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b, group_lens, group_offs = ctx.saved_tensors
        b_nk = b if ctx.trans_b else b.transpose(1, 2)
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:  # (M, N) @ b[g] (N, K): b[g] viewed as (K, N) rows
            grad_a = grouped_gemm_impl(
                grad_out, b_nk.transpose(1, 2), group_lens, group_offs, a.dtype
            )
        if ctx.needs_input_grad[1]:  # grad_b[g] = grad_out[g].T @ a[g]: (G, N, K)
            grad_nk = grouped_gemm_variable_k_impl(grad_out, a, group_lens, group_offs, b.dtype)
            grad_b = grad_nk if ctx.trans_b else grad_nk.transpose(1, 2).contiguous()
        return grad_a, grad_b, None, None, None


def grouped_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    group_lens: torch.Tensor,
    group_offs: torch.Tensor | None = None,
    trans_b: bool = False,
    num_cu: int | None = None,
) -> torch.Tensor:
    """Grouped ``a[rows of g] @ op(b[g])``; ``num_cu`` is accepted and ignored."""
    check_grouped_args(a, b, group_lens)
    if group_offs is None:
        group_offs = grouped_gemm_compute_offs(group_lens)
    return GroupedGemmFunction.apply(a, b, group_lens, group_offs, trans_b)
