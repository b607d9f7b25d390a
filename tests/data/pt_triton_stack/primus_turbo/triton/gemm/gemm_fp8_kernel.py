"""Fixture: the kernel under optimisation (plain Python standing for Triton)."""

BLOCK_M = 128
NUM_STAGES = 2


def gemm_fp8_blockwise_triton_kernel(a, b, trans_b=True):
    cols = b if trans_b else list(zip(*b, strict=True))
    return [[sum(x * y for x, y in zip(row, col, strict=True)) for col in cols] for row in a]
