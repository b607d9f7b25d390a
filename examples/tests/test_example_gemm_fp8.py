from __future__ import annotations

import pytest
import torch
from example_helpers import emulated_fp8_gemm, make_operands, outlier_operands, reference, snr_db

from turbo_kernels.pytorch.core.low_precision import (
    Float8QuantConfig,
    Format,
    ScalingGranularity,
)
from turbo_kernels.pytorch.ops import gemm_fp8

GRANULARITIES = list(ScalingGranularity)
SHAPES = [(128, 256, 512), (130, 200, 300)]  # the second one has ragged blocks everywhere
MIN_SNR = {Format.E4M3: 25.0, Format.E5M2: 20.0, Format.HYBRID: 25.0}
MIN_SNR_GRAD = {Format.E4M3: 25.0, Format.E5M2: 20.0, Format.HYBRID: 20.0}


def _run(
    m: int, n: int, k: int, trans_a: bool, trans_b: bool, config: Float8QuantConfig
) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    a, b = make_operands(m, n, k, trans_a, trans_b)
    out = gemm_fp8(a, b, trans_a=trans_a, trans_b=trans_b, config=config)
    grad_out = torch.randn(m, n, generator=torch.Generator().manual_seed(1)).bfloat16()
    out.backward(grad_out)
    assert a.grad is not None and b.grad is not None
    return [out, a.grad, b.grad], list(reference(a, b, trans_a, trans_b, grad_out))


@pytest.mark.parametrize("granularity", GRANULARITIES, ids=lambda g: g.name.lower())
@pytest.mark.parametrize("trans_b", [True, False], ids=["NT", "NN"])
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_gemm_fp8_e4m3_forward_backward_snr(
    shape: tuple[int, int, int], trans_b: bool, granularity: ScalingGranularity
) -> None:
    m, n, k = shape
    config = Float8QuantConfig(format=Format.E4M3, granularity=granularity)
    (out, grad_a, grad_b), (ref, grad_a_ref, grad_b_ref) = _run(m, n, k, False, trans_b, config)
    assert out.shape == (m, n) and out.dtype == torch.bfloat16
    assert grad_a.dtype == torch.bfloat16 and grad_b.dtype == torch.bfloat16
    assert snr_db(out, ref) >= 25.0
    assert snr_db(grad_a, grad_a_ref) >= 25.0
    assert snr_db(grad_b, grad_b_ref) >= 25.0


@pytest.mark.parametrize("fmt", [Format.E5M2, Format.HYBRID], ids=lambda f: f.name.lower())
@pytest.mark.parametrize("granularity", GRANULARITIES, ids=lambda g: g.name.lower())
def test_gemm_fp8_other_formats(fmt: Format, granularity: ScalingGranularity) -> None:
    config = Float8QuantConfig(format=fmt, granularity=granularity)
    (out, grad_a, grad_b), (ref, grad_a_ref, grad_b_ref) = _run(128, 256, 512, False, True, config)
    assert snr_db(out, ref) >= MIN_SNR[fmt]
    assert snr_db(grad_a, grad_a_ref) >= MIN_SNR_GRAD[fmt]
    assert snr_db(grad_b, grad_b_ref) >= MIN_SNR_GRAD[fmt]


def test_gemm_fp8_trans_a_and_out_dtype() -> None:
    config = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE)
    (out, grad_a, grad_b), (ref, grad_a_ref, grad_b_ref) = _run(96, 160, 256, True, True, config)
    assert snr_db(out, ref) >= 25.0 and snr_db(grad_a, grad_a_ref) >= 25.0
    assert snr_db(grad_b, grad_b_ref) >= 25.0
    a, b = make_operands(16, 32, 128, False, True)
    assert gemm_fp8(a, b, trans_b=True, out_dtype=torch.float32).dtype == torch.float32


def test_contract_fp8_is_really_used() -> None:
    """Much less accurate than the bf16 GEMM: the operands were really quantised."""
    a, b = make_operands(128, 128, 512, False, True)
    ref = a.detach().float() @ b.detach().float().t()
    assert snr_db(gemm_fp8(a, b, trans_b=True), ref) < 35.0


def test_config_defaults() -> None:
    assert Float8QuantConfig().format is Format.E4M3
    assert Float8QuantConfig().granularity is ScalingGranularity.TENSORWISE
    assert Float8QuantConfig().block_size is None
    assert Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE).block_size == 128
    assert Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE).block_size == 32
    with pytest.raises(ValueError):
        Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE, block_size=128)


@pytest.mark.parametrize(
    "granularity",
    [ScalingGranularity.TENSORWISE, ScalingGranularity.ROWWISE, ScalingGranularity.BLOCKWISE],
    ids=lambda g: g.name.lower(),
)
def test_contract_granularity_is_applied(granularity: ScalingGranularity) -> None:
    """The requested scaling groups, not a coarser recipe: on rows and blocks of very
    different magnitudes the output matches the recipe's emulation (above 50 dB when
    honest; one scale per tensor for BLOCKWISE reads below 35 dB)."""
    a, b = outlier_operands(130, 256, 384)
    config = Float8QuantConfig(format=Format.E4M3, granularity=granularity)
    out = gemm_fp8(a, b, trans_b=True, config=config)
    rows = {"TENSORWISE": (a.shape[0], b.shape[0]), "ROWWISE": (1, 1), "BLOCKWISE": (1, 128)}
    a_rows, b_rows = rows[granularity.name]
    cols = 128 if granularity is ScalingGranularity.BLOCKWISE else a.shape[1]
    assert snr_db(out, emulated_fp8_gemm(a, b, (a_rows, cols), (b_rows, cols))) >= 40.0
