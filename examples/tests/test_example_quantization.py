from __future__ import annotations

import pytest
import torch

from turbo_kernels.pytorch.core.low_precision import ScalingGranularity
from turbo_kernels.pytorch.ops import dequantize_fp8, quantize_fp8

CASES = [
    (ScalingGranularity.TENSORWISE, False, ()),
    (ScalingGranularity.ROWWISE, False, (70,)),
    (ScalingGranularity.BLOCKWISE, False, (70, 3)),
    (ScalingGranularity.BLOCKWISE, True, (1, 3)),
    (ScalingGranularity.MX_BLOCKWISE, False, (70, 10)),
]


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize(("granularity", "weight", "scale_shape"), CASES)
def test_quantize_really_quantises(
    granularity: ScalingGranularity, weight: bool, scale_shape: tuple[int, ...], dtype: torch.dtype
) -> None:
    x = torch.randn(70, 300, generator=torch.Generator().manual_seed(0)) * 3
    x_fp8, scale_inv = quantize_fp8(x, dtype, granularity, 128, weight=weight)
    assert x_fp8.dtype == dtype and x_fp8.shape == x.shape
    assert scale_inv.dtype == torch.float32 and tuple(scale_inv.shape) == scale_shape
    deq = dequantize_fp8(x_fp8, scale_inv, granularity, 128, weight=weight)
    # Every dequantised value is an fp8 value times its scale ...
    values = x_fp8.float()
    assert torch.equal(values.to(dtype).float(), values)
    assert values.abs().max() <= torch.finfo(dtype).max
    # ... the values differ from the input, but only by the fp8 rounding.
    assert not torch.equal(deq, x)
    rel = ((deq - x).norm() / x.norm()).item()
    assert 1e-3 < rel < (0.05 if dtype == torch.float8_e4m3fn else 0.1)
    if granularity is ScalingGranularity.MX_BLOCKWISE:
        assert torch.equal(torch.exp2(torch.log2(scale_inv).round()), scale_inv)


def test_tensorwise_scale_uses_full_range() -> None:
    x = torch.tensor([[0.5, -2.0, 1.0]])
    x_fp8, scale_inv = quantize_fp8(x, torch.float8_e4m3fn, ScalingGranularity.TENSORWISE)
    assert scale_inv.item() == pytest.approx(2.0 / 448.0)
    assert x_fp8.float().abs().max().item() == 448.0


def test_zero_tensor_stays_finite() -> None:
    x = torch.zeros(4, 256)
    for gran in ScalingGranularity:
        x_fp8, scale_inv = quantize_fp8(x, torch.float8_e4m3fn, gran, 128, weight=True)
        deq = dequantize_fp8(x_fp8, scale_inv, gran, 128, weight=True)
        assert torch.equal(deq, x)
