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


def _reference(
    x: torch.Tensor, granularity: str, block_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """An independent float32 reference (not the package's code): one scale per tensor,
    row or 1 x block_size block, ``scale_inv = amax / 448``, codes round-to-nearest-even
    of ``x / scale_inv``; scales shaped (), (M,) or (M, ceil(N / bs))."""
    xf = x.float()
    m, n = xf.shape
    if granularity == "tensorwise":
        scale = (xf.abs().amax().clamp(min=1e-12) / torch.tensor(448.0)).reshape(())
        full = scale.expand(m, n)
    elif granularity == "rowwise":
        scale = xf.abs().amax(dim=1).clamp(min=1e-12) / torch.tensor(448.0)
        full = scale[:, None].expand(m, n)
    else:
        kb = -(-n // block_size)
        padded = torch.nn.functional.pad(xf, (0, kb * block_size - n))
        scale = padded.reshape(m, kb, block_size).abs().amax(dim=2).clamp(min=1e-12)
        scale = scale / torch.tensor(448.0)
        full = scale.repeat_interleave(block_size, dim=1)[:, :n]
    codes = (xf / full).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return codes, scale


def _mismatches(
    codes: torch.Tensor, scale: torch.Tensor, ref_codes: torch.Tensor, ref_scale: torch.Tensor
) -> list[str]:
    """Scales within 2^-20 (relative) and codes bit-equal on at least 99.9% of elements,
    never more than one FP8 step apart (a last-bit scale difference may move a value
    across a rounding boundary)."""
    problems = []
    rel = ((scale.float().reshape(ref_scale.shape) - ref_scale).abs() / ref_scale).max().item()
    if rel > 2.0**-20:
        problems.append(f"scales off by {rel:.3g}")
    got, ref = codes.view(torch.uint8).int(), ref_codes.view(torch.uint8).int()
    signed = [torch.where(c >= 0x80, -(c & 0x7F), c & 0x7F) for c in (got, ref)]
    dist = (signed[0] - signed[1]).abs()
    if dist.max().item() > 1 or (dist > 0).float().mean().item() > 1e-3:
        problems.append(f"codes differ: max {dist.max().item()} steps, {int((dist > 0).sum())}")
    return problems


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_quantize_op_torch(granularity: str, shape: tuple[int, int]) -> None:
    x = _x(*shape, "cpu")
    gran = GRANULARITIES[granularity]
    codes, scale = quantize_fp8(x, torch.float8_e4m3fn, gran, block_size=128, axis=-1)
    ref_codes, ref_scale = _reference(x, granularity)
    assert _mismatches(codes, scale, ref_codes, ref_scale) == []
    # the kernel behind the op selector is the package's TORCH kernel
    kernel_codes, kernel_scale = quantize_torch(x, torch.float8_e4m3fn, gran, 128)
    assert torch.equal(codes.view(torch.uint8), kernel_codes.view(torch.uint8))
    assert torch.equal(scale, kernel_scale)


@pytest.mark.parametrize("granularity", list(GRANULARITIES))
def test_the_comparison_sees_a_wrong_quantiser(granularity: str) -> None:
    """The reference comparison can fail: scales 1% off, or codes from a truncating
    conversion, are reported."""
    x = _x(64, 512, "cpu")
    ref_codes, ref_scale = _reference(x, granularity)
    assert _mismatches(ref_codes, ref_scale * 1.01, ref_codes, ref_scale)
    shifted = (ref_codes.view(torch.uint8) ^ 0x02).view(torch.float8_e4m3fn)
    assert _mismatches(shifted, ref_scale, ref_codes, ref_scale)


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
