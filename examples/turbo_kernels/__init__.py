"""turbo_kernels: a small GEMM / FP8 GEMM kernel library laid out like Primus-Turbo.

User API: ``turbo_kernels.pytorch.ops`` (``gemm``, ``gemm_fp8``, ``grouped_gemm``,
``grouped_gemm_fp8``, ``quantize_fp8``, ``dequantize_fp8``, ``flash_attn_func``);
quantisation config: ``turbo_kernels.pytorch.core.low_precision``; backend dispatch:
``turbo_kernels.pytorch.kernels`` (one selector variable per op family).
"""

__version__ = "0.1.0"
