"""The quantize_fp8 op through its backend selector: TORCH everywhere, TRITON on a GPU
(codes and scales bit-exact against TORCH's)."""

from __future__ import annotations

import pytest
import torch

from turbo_kernels.pytorch.core.low_precision import ScalingGranularity
from turbo_kernels.pytorch.kernels.backend import QUANTIZE_BACKEND_ENV
from turbo_kernels.pytorch.kernels.quantization import quantize_fp8 as quantize_torch
from turbo_kernels.pytorch.ops import quantize_fp8

GRANULARITIES = {
    "tensorwise": ScalingGranularity.TENSORWISE,
    "rowwise": ScalingGranularity.ROWWISE,
    "blockwise": ScalingGranularity.BLOCKWISE,
}
SHAPES = [(64, 512), (33, 300), (1, 4096)]


def _x(m: int, n: int, device: str) -> torch.Tensor:
    x = torch.randn(m, n, generator=torch.Generator().manual_seed(m * n))
    return (x * torch.linspace(0.1, 10, m)[:, None]).to(device, torch.bfloat16)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_quantize_op_torch(granularity: str, shape: tuple[int, int]) -> None:
    x = _x(*shape, "cpu")
    gran = GRANULARITIES[granularity]
    codes, scale = quantize_fp8(x, torch.float8_e4m3fn, gran, block_size=128, axis=-1)
    ref_codes, ref_scale = quantize_torch(x, torch.float8_e4m3fn, gran, 128)
    assert torch.equal(codes.view(torch.uint8), ref_codes.view(torch.uint8))
    assert torch.equal(scale, ref_scale)


def test_quantize_other_axis_is_refused() -> None:
    with pytest.raises(NotImplementedError, match="axis 0"):
        quantize_fp8(torch.ones(4, 4), torch.float8_e4m3fn, ScalingGranularity.ROWWISE, axis=0)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_quantize_op_triton(
    granularity: str, shape: tuple[int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(QUANTIZE_BACKEND_ENV, "TRITON")
    x = _x(*shape, "cuda")
    gran = GRANULARITIES[granularity]
    codes, scale = quantize_fp8(x, torch.float8_e4m3fn, gran, block_size=128, axis=-1)
    ref_codes, ref_scale = quantize_torch(x, torch.float8_e4m3fn, gran, 128)
    # Both divide with correct rounding and convert round-to-nearest-even: bit-exact.
    assert torch.equal(scale, ref_scale)
    assert torch.equal(codes.view(torch.uint8), ref_codes.view(torch.uint8))
