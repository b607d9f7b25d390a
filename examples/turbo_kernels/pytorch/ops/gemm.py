"""BF16 GEMM op: ``gemm(a, b, trans_a=False, trans_b=False, out_dtype=None)``."""

from __future__ import annotations

from typing import Any

import torch

from turbo_kernels.pytorch.kernels.gemm_impl import gemm_impl

__all__ = ["gemm"]


def as_mk_nk(
    a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Views of the operands as a (M, K) and b (N, K): every kernel computes ``a @ b.T``."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"expected 2-D operands, got {tuple(a.shape)} and {tuple(b.shape)}")
    a_mk = a.t() if trans_a else a
    b_nk = b if trans_b else b.t()
    if a_mk.shape[1] != b_nk.shape[1]:
        raise ValueError(
            f"K mismatch: a {tuple(a.shape)} (trans_a={trans_a}), "
            f"b {tuple(b.shape)} (trans_b={trans_b})"
        )
    return a_mk, b_nk


class GemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        trans_a: bool,
        trans_b: bool,
        out_dtype: torch.dtype,
    ) -> torch.Tensor:
        a_mk, b_nk = as_mk_nk(a, b, trans_a, trans_b)
        ctx.save_for_backward(a, b)
        ctx.trans_a, ctx.trans_b = trans_a, trans_b
        return gemm_impl(a_mk, b_nk, out_dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b = ctx.saved_tensors
        a_mk, b_nk = as_mk_nk(a, b, ctx.trans_a, ctx.trans_b)
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            grad_a_mk = gemm_impl(grad_out, b_nk.t(), a.dtype)  # (M, N) @ (N, K)
            grad_a = grad_a_mk.t() if ctx.trans_a else grad_a_mk
        if ctx.needs_input_grad[1]:
            grad_b_nk = gemm_impl(grad_out.t(), a_mk.t(), b.dtype)  # (N, M) @ (M, K)
            grad_b = grad_b_nk if ctx.trans_b else grad_b_nk.t()
        return grad_a, grad_b, None, None, None


def gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool = False,
    trans_b: bool = False,
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """``op(a) @ op(b)`` where op transposes when ``trans_*`` is set; differentiable.

    As in Primus-Turbo, a linear layer is ``gemm(x, weight, trans_b=True)`` with
    x (M, K) and weight (N, K), giving (M, N).
    """
    return GemmFunction.apply(a, b, trans_a, trans_b, out_dtype or a.dtype)
