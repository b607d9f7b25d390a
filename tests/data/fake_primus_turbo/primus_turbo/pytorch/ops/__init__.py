"""The user API: ``gemm_fp8(a, b, trans_b=True, config=...)``."""

from primus_turbo.pytorch.ops.gemm_fp8 import gemm_fp8

__all__ = ["gemm_fp8"]
