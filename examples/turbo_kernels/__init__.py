"""turbo_kernels: a small GEMM / FP8 GEMM kernel library laid out like Primus-Turbo.

User API: ``turbo_kernels.pytorch.ops`` (``gemm``, ``gemm_fp8``, ``quantize_fp8``,
``dequantize_fp8``); quantisation config: ``turbo_kernels.pytorch.core.low_precision``;
backend dispatch: ``turbo_kernels.pytorch.kernels``.
"""

__version__ = "0.1.0"
