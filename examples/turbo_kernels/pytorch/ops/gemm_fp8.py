"""FP8 GEMM op: ``gemm_fp8(a, b, trans_a=False, trans_b=False, out_dtype=None, config=None)``.

Forward: quantise a (M, K) as activations and b (N, K) as weights with the config's
granularity, then the FP8 kernel. Backward: quantise grad_out (E4M3, or E5M2 for the
E5M2 and HYBRID formats) and re-quantise the saved operands along the new reduction dim:
grad_a = grad_out @ b, grad_b = grad_out.T @ a, both through the same FP8 kernels.
"""

from __future__ import annotations

from typing import Any

import torch

from turbo_kernels.pytorch.core.low_precision import Float8QuantConfig, float8_dtype
from turbo_kernels.pytorch.kernels.gemm_fp8_impl import gemm_fp8_impl
from turbo_kernels.pytorch.kernels.quantization import quantize_fp8
from turbo_kernels.pytorch.ops.gemm import as_mk_nk

__all__ = ["gemm_fp8"]


def _fp8_gemm(
    a: torch.Tensor,
    a_dtype: torch.dtype,
    b: torch.Tensor,
    b_dtype: torch.dtype,
    config: Float8QuantConfig,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    """Quantise a (M, K) as activations and b (N, K) as weights; return a @ b.T."""
    gran, bs = config.granularity, config.block_size
    a_fp8, a_scale_inv = quantize_fp8(a, a_dtype, gran, bs)
    b_fp8, b_scale_inv = quantize_fp8(b, b_dtype, gran, bs, weight=True)
    return gemm_fp8_impl(a_fp8, a_scale_inv, b_fp8, b_scale_inv, gran, out_dtype, bs)


class GemmFP8Function(torch.autograd.Function):
    @staticmethod
    def forward(
        ctx: Any,
        a: torch.Tensor,
        b: torch.Tensor,
        trans_a: bool,
        trans_b: bool,
        out_dtype: torch.dtype,
        config: Float8QuantConfig,
    ) -> torch.Tensor:
        a_mk, b_nk = as_mk_nk(a, b, trans_a, trans_b)
        fwd = float8_dtype(config.forward_format, a.device)
        ctx.save_for_backward(a, b)
        ctx.trans_a, ctx.trans_b, ctx.config = trans_a, trans_b, config
        return _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        a, b = ctx.saved_tensors
        config: Float8QuantConfig = ctx.config
        a_mk, b_nk = as_mk_nk(a, b, ctx.trans_a, ctx.trans_b)
        fwd = float8_dtype(config.forward_format, a.device)
        bwd = float8_dtype(config.backward_format, a.device)
        grad_a = grad_b = None
        if ctx.needs_input_grad[0]:
            # (M, N) @ (N, K): reduce over N.
            grad_a_mk = _fp8_gemm(grad_out, bwd, b_nk.t(), fwd, config, a.dtype)
            grad_a = grad_a_mk.t() if ctx.trans_a else grad_a_mk
        if ctx.needs_input_grad[1]:
            # (N, M) @ (M, K): reduce over M.
            grad_b_nk = _fp8_gemm(grad_out.t(), bwd, a_mk.t(), fwd, config, b.dtype)
            grad_b = grad_b_nk if ctx.trans_b else grad_b_nk.t()
        return grad_a, grad_b, None, None, None, None


def gemm_fp8(
    a: torch.Tensor,
    b: torch.Tensor,
    trans_a: bool = False,
    trans_b: bool = False,
    out_dtype: torch.dtype | None = None,
    config: Float8QuantConfig | None = None,
) -> torch.Tensor:
    """FP8 ``op(a) @ op(b)``, differentiable; called as Primus-Turbo's
    ``gemm_fp8(x, weight, trans_b=True, config=cfg)`` with x (M, K), weight (N, K).

    ``config`` defaults to ``Float8QuantConfig()`` (E4M3, tensorwise); ``out_dtype``
    defaults to a's dtype.
    """
    if config is None:
        config = Float8QuantConfig()
    if not a.is_floating_point() or a.element_size() < 2:
        raise TypeError(f"gemm_fp8 takes high-precision inputs (bf16/fp16/fp32), got {a.dtype}")
    return GemmFP8Function.apply(a, b, trans_a, trans_b, out_dtype or a.dtype, config)
