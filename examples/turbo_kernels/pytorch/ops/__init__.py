"""User API, named as Primus-Turbo's ``primus_turbo.pytorch.ops``."""

from turbo_kernels.pytorch.ops.attention import flash_attn_func
from turbo_kernels.pytorch.ops.gemm import gemm
from turbo_kernels.pytorch.ops.gemm_fp8 import gemm_fp8
from turbo_kernels.pytorch.ops.grouped_gemm import grouped_gemm
from turbo_kernels.pytorch.ops.grouped_gemm_fp8 import grouped_gemm_fp8
from turbo_kernels.pytorch.ops.quantization import dequantize_fp8, quantize_fp8

__all__ = [
    "dequantize_fp8",
    "flash_attn_func",
    "gemm",
    "gemm_fp8",
    "grouped_gemm",
    "grouped_gemm_fp8",
    "quantize_fp8",
]
