"""FP8 grouped GEMM op, named as Primus-Turbo's:
``grouped_gemm_fp8(a, b, group_lens, group_offs=None, trans_b=True, config=None, num_cu=None)``.

Group by group, through the FP8 GEMM path of ``gemm_fp8`` (quantise the group's rows as
activations and its expert weight as weights with the config's granularity, then the
FP8 kernel of the selected GEMM backend); the backward quantises grad_out the same way
(E5M2 for the E5M2 and HYBRID formats).  An empty group produces no rows and a zero
weight gradient.  The group sizes are read from ``group_lens`` at run time: one kernel
launch per non-empty group (a single-launch FP8 grouped kernel is future work).
"""

from __future__ import annotations

from typing import Any

import torch

from turbo_kernels.pytorch.core.low_precision import Float8QuantConfig, float8_dtype
from turbo_kernels.pytorch.ops.gemm_fp8 import _fp8_gemm
from turbo_kernels.pytorch.ops.grouped_gemm import check_grouped_args

__all__ = ["grouped_gemm_fp8"]


def _bounds(group_lens: torch.Tensor) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for g, rows in enumerate(group_lens.tolist()):
        out.append((g, start, start + int(rows)))
        start += int(rows)
    return out


class GroupedGemmFP8Function(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        group_lens: torch.Tensor,
        trans_b: bool,
        config: Float8QuantConfig,
    ) -> torch.Tensor:
        b_nk = b if trans_b else b.transpose(1, 2)
        fwd = float8_dtype(config.forward_format, a.device)
        out = torch.empty(a.shape[0], b_nk.shape[1], dtype=a.dtype, device=a.device)
        for g, lo, hi in _bounds(group_lens):
            if hi > lo:
                out[lo:hi] = _fp8_gemm(a[lo:hi], fwd, b_nk[g], fwd, config, a.dtype)
        ctx.save_for_backward(a, b, group_lens)
        ctx.trans_b, ctx.config = trans_b, config
        return out

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b, group_lens = ctx.saved_tensors
        config: Float8QuantConfig = ctx.config
        b_nk = b if ctx.trans_b else b.transpose(1, 2)
        fwd = float8_dtype(config.forward_format, a.device)
        bwd = float8_dtype(config.backward_format, a.device)
        grad_a = torch.zeros_like(a)
        grad_nk = torch.zeros(b_nk.shape, dtype=b.dtype, device=b.device)
        for g, lo, hi in _bounds(group_lens):
            if hi == lo:
                continue
            go = grad_out[lo:hi]
            grad_a[lo:hi] = _fp8_gemm(go, bwd, b_nk[g].t(), fwd, config, a.dtype)
            grad_nk[g] = _fp8_gemm(go.t(), bwd, a[lo:hi].t(), fwd, config, b.dtype)
        grad_b = grad_nk if ctx.trans_b else grad_nk.transpose(1, 2).contiguous()
        return grad_a, grad_b, None, None, None


def grouped_gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    group_lens: torch.Tensor,
    group_offs: torch.Tensor | None = None,
    trans_b: bool = True,
    config: Float8QuantConfig | None = None,
    num_cu: int | None = None,
) -> torch.Tensor:
    """FP8 grouped ``a[rows of g] @ op(b[g])`` from bf16/fp16 inputs; differentiable.
    ``group_offs`` and ``num_cu`` are accepted for Primus-Turbo compatibility."""
    check_grouped_args(a, b, group_lens)
    if not a.is_floating_point() or a.element_size() < 2:
        raise TypeError(f"grouped_gemm_fp8 takes bf16/fp16/fp32 inputs, got {a.dtype}")
    return GroupedGemmFP8Function.apply(a, b, group_lens, trans_b, config or Float8QuantConfig())
