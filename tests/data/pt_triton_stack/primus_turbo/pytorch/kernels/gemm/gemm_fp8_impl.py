"""Fixture: the dispatcher; imports every backend's kernel at the top, as upstream's."""

from primus_turbo.flydsl.gemm.gemm_fp8_kernel import gemm_fp8_tensorwise_flydsl_kernel
from primus_turbo.triton.gemm.gemm_fp8_kernel import gemm_fp8_blockwise_triton_kernel


def gemm_fp8_impl(a, b, trans_b, backend):
    if backend == "FLYDSL":
        return gemm_fp8_tensorwise_flydsl_kernel(a, b)
    return gemm_fp8_blockwise_triton_kernel(a, b, trans_b)
