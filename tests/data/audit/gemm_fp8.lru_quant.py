# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""FP8 GEMM autograd op (sample modelled on primus_turbo/pytorch/ops/gemm_fp8.py)."""

import functools

import torch

from primus_turbo.pytorch.kernels.gemm_fp8 import gemm_fp8_impl, quantize_fp8


@functools.lru_cache(maxsize=16)
def quantize_fp8_cached(x: torch.Tensor, config):
    return quantize_fp8(x, config)


class FP8GemmFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b, trans_b, config):
        a_fp8, a_scale = quantize_fp8_cached(a, config)
        b_fp8, b_scale = quantize_fp8_cached(b, config)
        out = gemm_fp8_impl(a_fp8, a_scale, b_fp8, b_scale, trans_b=trans_b)
        ctx.save_for_backward(a_fp8, a_scale, b_fp8, b_scale)
        ctx.trans_b = trans_b
        ctx.config = config
        return out

    @staticmethod
    def backward(ctx, grad_out):
        a_fp8, a_scale, b_fp8, b_scale = ctx.saved_tensors
        go_fp8, go_scale = quantize_fp8(grad_out, ctx.config)
        grad_a = gemm_fp8_impl(go_fp8, go_scale, b_fp8, b_scale, trans_b=not ctx.trans_b)
        grad_b = gemm_fp8_impl(go_fp8, go_scale, a_fp8, a_scale, trans_a=True)
        return grad_a, grad_b, None, None


def gemm_fp8(a, b, trans_b=True, config=None):
    return FP8GemmFunction.apply(a, b, trans_b, config)
