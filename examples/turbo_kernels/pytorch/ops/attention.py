"""Flash attention op, named as Primus-Turbo's ``ops.flash_attn_func``:
``flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False,
window_size=(-1, -1), bias=None, alibi_slopes=None, deterministic=False,
return_lse=False, return_attn_probs=False)``, layout "bshd": q (B, S, H, D), k and v
(B, S, H_kv, D) (GQA when H_kv < H).  Only the plain case is implemented: dropout 0,
no window, bias, ALiBi, LSE or probabilities.

Backend ``TURBO_KERNELS_ATTENTION_BACKEND``: TRITON runs the forward as a flash kernel
(turbo_kernels/triton/attention_kernel.py); its backward recomputes the attention with
torch ops and autograd (a Triton backward kernel is future work).  TORCH runs forward
and backward as explicit torch ops.
"""

from __future__ import annotations

from typing import Any

import torch

from turbo_kernels.cpu.attention import attention_torch
from turbo_kernels.pytorch.kernels.backend import (
    ATTENTION_BACKEND_ENV,
    BackendType,
    PrecisionType,
    get_backend,
)

__all__ = ["flash_attn_func"]


class FlashAttnTritonFunction(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
    ) -> torch.Tensor:
        from turbo_kernels.triton.attention_kernel import flash_attn_fwd_triton

        ctx.save_for_backward(q, k, v)
        ctx.causal, ctx.scale = causal, scale
        return flash_attn_fwd_triton(q, k, v, causal, scale)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        q, k, v = (t.detach().requires_grad_(True) for t in ctx.saved_tensors)
        with torch.enable_grad():
            out = attention_torch(q, k, v, ctx.causal, ctx.scale)
            dq, dk, dv = torch.autograd.grad(out, (q, k, v), grad_out)
        return dq, dk, dv, None, None


def flash_attn_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    bias: torch.Tensor | None = None,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_lse: bool = False,
    return_attn_probs: bool = False,
) -> torch.Tensor:
    """softmax(q k^T * softmax_scale) v per head (default scale D^-0.5); (B, S, H, D)."""
    unsupported = {
        "dropout_p": dropout_p != 0.0,
        "window_size": tuple(window_size) != (-1, -1),
        "bias": bias is not None,
        "alibi_slopes": alibi_slopes is not None,
        "return_lse": return_lse,
        "return_attn_probs": return_attn_probs,
    }
    bad = [name for name, used in unsupported.items() if used]
    if bad:
        raise NotImplementedError(f"flash_attn_func: {', '.join(bad)} not supported")
    if q.dim() != 4 or k.shape != v.shape or k.shape[0] != q.shape[0]:
        raise ValueError(f"expected q (B,S,H,D), k/v (B,S,H_kv,D); got {q.shape}, {k.shape}")
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    backend = get_backend(ATTENTION_BACKEND_ENV, PrecisionType.OTHER, q.device)
    if backend is BackendType.TRITON:
        return FlashAttnTritonFunction.apply(q, k, v, causal, scale)
    return attention_torch(q, k, v, causal, scale)
