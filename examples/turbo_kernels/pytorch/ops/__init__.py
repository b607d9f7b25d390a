"""User API, named as Primus-Turbo's ``primus_turbo.pytorch.ops``."""

from turbo_kernels.pytorch.kernels.quantization import dequantize_fp8, quantize_fp8
from turbo_kernels.pytorch.ops.gemm import gemm
from turbo_kernels.pytorch.ops.gemm_fp8 import gemm_fp8

__all__ = ["dequantize_fp8", "gemm", "gemm_fp8", "quantize_fp8"]
