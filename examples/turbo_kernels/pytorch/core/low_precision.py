"""Low-precision configuration, named as in Primus-Turbo's ``pytorch/core/low_precision.py``."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import torch

__all__ = [
    "MX_BLOCK_SIZE",
    "Float8QuantConfig",
    "Format",
    "ScalingGranularity",
    "float8_dtype",
    "float8_e4m3",
    "float8_e5m2",
]

DEFAULT_BLOCK_SIZE = 128
MX_BLOCK_SIZE = 32


class Format(Enum):
    E4M3 = "e4m3"
    E5M2 = "e5m2"
    HYBRID = "hybrid"  # E4M3 for the forward operands, E5M2 for the gradients


class ScalingGranularity(Enum):
    TENSORWISE = "tensorwise"  # one scale per tensor
    ROWWISE = "rowwise"  # one scale per row of a (M) and per row of b (N), along K
    BLOCKWISE = "blockwise"  # 1 x block for activations, block x block for weights
    MX_BLOCKWISE = "mx_blockwise"  # mxfp8: 1 x 32 along K, power-of-two scales


@dataclass
class Float8QuantConfig:
    format: Format = Format.E4M3
    granularity: ScalingGranularity = ScalingGranularity.TENSORWISE
    block_size: int | None = None

    def __post_init__(self) -> None:
        if self.granularity is ScalingGranularity.BLOCKWISE and self.block_size is None:
            self.block_size = DEFAULT_BLOCK_SIZE
        if self.granularity is ScalingGranularity.MX_BLOCKWISE:
            if self.block_size not in (None, MX_BLOCK_SIZE):
                raise ValueError(f"MX_BLOCKWISE uses block_size {MX_BLOCK_SIZE}")
            self.block_size = MX_BLOCK_SIZE
        if self.block_size is not None and self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")

    @property
    def forward_format(self) -> Format:
        return Format.E5M2 if self.format is Format.E5M2 else Format.E4M3

    @property
    def backward_format(self) -> Format:
        """Format of the quantised gradient: E5M2 for HYBRID and E5M2, else E4M3."""
        return Format.E4M3 if self.format is Format.E4M3 else Format.E5M2


def _is_gfx942(device: torch.device) -> bool:
    if device.type != "cuda" or torch.version.hip is None:
        return False
    arch = getattr(torch.cuda.get_device_properties(device), "gcnArchName", "")
    return arch.startswith("gfx942")


def float8_e4m3(device: torch.device | str | None = None) -> torch.dtype:
    """torch E4M3 dtype for ``device``: the fnuz variant on ROCm gfx942 (MI300), OCP e4m3fn
    elsewhere (CPU, NVIDIA, gfx950). Triton maps them to tl.float8e4b8 / tl.float8e4nv."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return torch.float8_e4m3fnuz if _is_gfx942(dev) else torch.float8_e4m3fn


def float8_e5m2(device: torch.device | str | None = None) -> torch.dtype:
    """torch E5M2 dtype for ``device`` (fnuz on gfx942; Triton: tl.float8e5b16 / tl.float8e5)."""
    dev = torch.device(device) if device is not None else torch.device("cpu")
    return torch.float8_e5m2fnuz if _is_gfx942(dev) else torch.float8_e5m2


def float8_dtype(fmt: Format, device: torch.device | str | None = None) -> torch.dtype:
    if fmt is Format.HYBRID:
        raise ValueError("HYBRID is a pair of formats; use forward_format / backward_format")
    return float8_e4m3(device) if fmt is Format.E4M3 else float8_e5m2(device)
