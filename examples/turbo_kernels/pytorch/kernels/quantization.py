"""FP8 quantisation in plain torch ops (runs on any device).

Convention (as in Primus-Turbo): ``x_fp8 = x / scale_inv`` saturated to the format's
range, ``x ~= x_fp8 * scale_inv``; the GEMM kernels take ``scale_inv`` (dequantisation
multipliers, float32). Scale shapes for a 2-D tensor of shape (R, K), K the reduction dim:

* TENSORWISE: ``()``; ROWWISE: ``(R,)``;
* BLOCKWISE: ``(R, ceil(K/bs))`` for activations (1 x bs blocks along K),
  ``(ceil(R/bs), ceil(K/bs))`` for weights (``weight=True``: bs x bs blocks);
* MX_BLOCKWISE: ``(R, ceil(K/32))``, powers of two rounded up from amax / fp8_max
  (stored as float32, not E8M0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from turbo_kernels.pytorch.core.low_precision import MX_BLOCK_SIZE, ScalingGranularity

__all__ = ["dequantize_fp8", "expand_scales", "quantize_fp8"]

_AMAX_EPS = 1e-12


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(x: torch.Tensor, block: int, two_d: bool) -> torch.Tensor:
    """x zero-padded to whole blocks, viewed as (R, KB, bs), or (RB, bs, KB, bs) if two_d."""
    r, k = x.shape
    kb, rb = _cdiv(k, block), _cdiv(r, block)
    xp = F.pad(x, (0, kb * block - k, 0, rb * block - r if two_d else 0))
    return xp.reshape(rb, block, kb, block) if two_d else xp.reshape(r, kb, block)


def expand_scales(
    scale_inv: torch.Tensor,
    shape: tuple[int, int] | torch.Size,
    granularity: ScalingGranularity,
    block_size: int | None = None,
    weight: bool = False,
) -> torch.Tensor:
    """Broadcast ``scale_inv`` to a tensor of ``shape`` (element-wise multipliers)."""
    r, k = shape
    if granularity is ScalingGranularity.TENSORWISE:
        return scale_inv.reshape(1, 1)
    if granularity is ScalingGranularity.ROWWISE:
        return scale_inv.reshape(r, 1)
    block = _block_size(granularity, block_size)
    full = scale_inv.repeat_interleave(block, dim=1)[:, :k]
    if weight and granularity is ScalingGranularity.BLOCKWISE:
        full = full.repeat_interleave(block, dim=0)[:r]
    return full


def _block_size(granularity: ScalingGranularity, block_size: int | None) -> int:
    if granularity is ScalingGranularity.MX_BLOCKWISE:
        return MX_BLOCK_SIZE
    if block_size is None:
        raise ValueError("BLOCKWISE quantisation needs a block_size")
    return block_size


def quantize_fp8(
    x: torch.Tensor,
    dtype: torch.dtype,
    granularity: ScalingGranularity,
    block_size: int | None = None,
    weight: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantise a 2-D tensor (R, K) to ``dtype``; returns ``(x_fp8, scale_inv)``.

    ``weight`` selects bs x bs blocks for BLOCKWISE (activations use 1 x bs); it has no
    effect on the other granularities.
    """
    if x.dim() != 2:
        raise ValueError(f"quantize_fp8 expects a 2-D tensor, got shape {tuple(x.shape)}")
    fp8_max = torch.finfo(dtype).max
    xf = x.float()
    blocks = None
    if granularity is ScalingGranularity.TENSORWISE:
        amax = xf.abs().amax()
    elif granularity is ScalingGranularity.ROWWISE:
        amax = xf.abs().amax(dim=1)
    else:
        two_d = weight and granularity is ScalingGranularity.BLOCKWISE
        blocks = _blocks(xf, _block_size(granularity, block_size), two_d)
        amax = blocks.abs().amax(dim=(1, 3) if two_d else 2)
    amax = amax.clamp(min=_AMAX_EPS)
    # Divide by a tensor, not a Python float: on CUDA, torch turns division by a host
    # scalar into multiplication by its reciprocal, which can round the scale 1 ULP away
    # from amax / fp8_max (and then move an FP8 code).  Tensor division is correctly
    # rounded on every device, as the Triton kernels' div_rn.  ``torch.full`` fills on
    # the device: no host-to-device copy, so the step can be captured in a CUDA graph
    # (``torch.tensor(value, device=...)`` copies from the host every call).
    max_t = torch.full((), fp8_max, dtype=torch.float32, device=amax.device)
    if granularity is ScalingGranularity.MX_BLOCKWISE:
        # Power-of-two scale rounded up (as NVIDIA's MXFP8 recipe), so nothing saturates;
        # the OCP spec's floor(log2(amax)) - emax can clip a block's largest values.
        scale_inv = torch.exp2(torch.ceil(torch.log2(amax / max_t)))
    else:
        scale_inv = amax / max_t
    scale_inv = scale_inv.to(torch.float32).contiguous()
    if blocks is None:
        scaled = xf / expand_scales(scale_inv, x.shape, granularity)
    else:  # divide block by block, then drop the padding
        per_block = scale_inv[:, None, :, None] if blocks.dim() == 4 else scale_inv[:, :, None]
        scaled = (blocks / per_block).reshape(-1, blocks.shape[-2] * blocks.shape[-1])
        scaled = scaled[: x.shape[0], : x.shape[1]]
    x_fp8 = scaled.clamp_(-fp8_max, fp8_max).to(dtype)
    return x_fp8, scale_inv


def dequantize_fp8(
    x_fp8: torch.Tensor,
    scale_inv: torch.Tensor,
    granularity: ScalingGranularity,
    block_size: int | None = None,
    weight: bool = False,
) -> torch.Tensor:
    """Inverse of ``quantize_fp8`` up to the FP8 rounding; returns float32."""
    return x_fp8.float() * expand_scales(scale_inv, x_fp8.shape, granularity, block_size, weight)
