"""Focused test of the fixture's gemm_fp8 (names as upstream's, one per granularity)."""

import pytest
import torch
from primus_turbo.pytorch.core.low_precision import Float8QuantConfig, Format, ScalingGranularity
from primus_turbo.pytorch.ops import gemm_fp8
from primus_turbo.pytorch.ops.gemm_fp8 import quantised

BACKENDS = ["TRITON", "CK", "HIPBLASLT", "TURBO"]


def check(granularity: ScalingGranularity, block_size: int | None) -> None:
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(16, 96, generator=gen).to(torch.bfloat16).requires_grad_(True)
    b = torch.randn(40, 96, generator=gen).to(torch.bfloat16).requires_grad_(True)
    config = Float8QuantConfig(Format.E4M3, granularity, block_size)
    out = gemm_fp8(a, b, trans_b=True, config=config)
    ref = quantised(a, config, False) @ quantised(b, config, True).t()  # the FP8 recipe
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2)
    g = torch.ones_like(out)
    da, db = torch.autograd.grad(out, (a, b), g)
    torch.testing.assert_close(da.float(), g.float() @ b.float(), rtol=2e-2, atol=5e-2)
    torch.testing.assert_close(db.float(), g.float().t() @ a.float(), rtol=2e-2, atol=5e-2)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_fp8_tensorwise(backend: str) -> None:
    check(ScalingGranularity.TENSORWISE, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_fp8_rowwise(backend: str) -> None:
    check(ScalingGranularity.ROWWISE, None)


@pytest.mark.parametrize("backend", BACKENDS)
def test_gemm_fp8_blockwise(backend: str) -> None:
    check(ScalingGranularity.BLOCKWISE, 128)
