"""FP8 grouped GEMM: every granularity on skewed and empty groups, SNR >= 25 dB (E4M3)
against a float32 per-group reference."""

from __future__ import annotations

import pytest
import torch
from example_helpers import snr_db
from test_example_grouped_gemm import LENS, reference

from turbo_kernels.pytorch.core.low_precision import Float8QuantConfig, ScalingGranularity
from turbo_kernels.pytorch.kernels import set_gemm_backend
from turbo_kernels.pytorch.ops import grouped_gemm_fp8

GRANULARITIES = {
    "tensorwise": ScalingGranularity.TENSORWISE,
    "rowwise": ScalingGranularity.ROWWISE,
    "blockwise": ScalingGranularity.BLOCKWISE,
}


def run_case(lens: list[int], granularity: str, device: str) -> None:
    gen = torch.Generator().manual_seed(1)
    m, n, k = sum(lens), 128, 256
    a = torch.randn(m, k, generator=gen).to(device, torch.bfloat16).requires_grad_()
    b = torch.randn(len(lens), n, k, generator=gen).to(device, torch.bfloat16).requires_grad_()
    config = Float8QuantConfig(granularity=GRANULARITIES[granularity])
    group_lens = torch.tensor(lens, dtype=torch.int64, device=device)
    out = grouped_gemm_fp8(a, b, group_lens, trans_b=True, config=config)
    grad_out = torch.randn(m, n, generator=gen).to(device, torch.bfloat16)
    out.backward(grad_out)
    ref, ref_da, ref_db = reference(a, b, lens, grad_out)
    assert a.grad is not None and b.grad is not None
    for got, want in ((out, ref), (a.grad, ref_da), (b.grad, ref_db)):
        assert snr_db(got, want) >= 25


@pytest.mark.parametrize("name", list(LENS))
@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_grouped_gemm_fp8_torch(granularity: str, name: str) -> None:
    set_gemm_backend("TORCH")
    run_case(LENS[name], granularity, "cpu")


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(LENS))
@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_grouped_gemm_fp8_triton(granularity: str, name: str) -> None:
    pytest.importorskip("triton")
    set_gemm_backend("TRITON")
    run_case(LENS[name], granularity, "cuda")
