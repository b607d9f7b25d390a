"""Fixture: the op that calls the FP8 GEMM kernels."""

import os

from primus_turbo.pytorch.core.low_precision import Float8QuantConfig, ScalingGranularity
from primus_turbo.pytorch.kernels.gemm.gemm_fp8_impl import gemm_fp8_impl

__all__ = ["gemm_fp8"]


def gemm_fp8(a, b, trans_b=False, config=None):
    config = config or Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE)
    backend = os.environ.get("PRIMUS_TURBO_GEMM_BACKEND", "TRITON")
    return gemm_fp8_impl(a, b, trans_b, backend)
