"""Kernel dispatch: picks the backend (TRITON or TORCH) for each op and precision."""

from turbo_kernels.pytorch.kernels import backend
from turbo_kernels.pytorch.kernels.backend import (
    GEMM_BACKEND_ENV,
    BackendType,
    BackendUnavailableError,
    PrecisionType,
    default_gemm_backend,
    get_gemm_backend,
    set_gemm_backend,
)
from turbo_kernels.pytorch.kernels.gemm_fp8_impl import gemm_fp8_impl
from turbo_kernels.pytorch.kernels.gemm_impl import gemm_impl

__all__ = [
    "GEMM_BACKEND_ENV",
    "BackendType",
    "BackendUnavailableError",
    "PrecisionType",
    "backend",
    "default_gemm_backend",
    "gemm_fp8_impl",
    "gemm_impl",
    "get_gemm_backend",
    "set_gemm_backend",
]
