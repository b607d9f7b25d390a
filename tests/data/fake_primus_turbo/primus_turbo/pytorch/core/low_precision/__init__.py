"""FP8 configuration, named as upstream's (Format, ScalingGranularity, Float8QuantConfig)."""

from dataclasses import dataclass
from enum import Enum


class Format(Enum):
    E4M3 = "e4m3"
    E5M2 = "e5m2"
    HYBRID = "hybrid"


class ScalingGranularity(Enum):
    TENSORWISE = "tensorwise"
    ROWWISE = "rowwise"
    BLOCKWISE = "blockwise"
    MX_BLOCKWISE = "mx_blockwise"


@dataclass(frozen=True)
class Float8QuantConfig:
    format: Format = Format.E4M3
    granularity: ScalingGranularity = ScalingGranularity.TENSORWISE
    block_size: int | None = None

    def __post_init__(self) -> None:
        blocked = (ScalingGranularity.BLOCKWISE, ScalingGranularity.MX_BLOCKWISE)
        if self.granularity in blocked and not self.block_size:
            raise ValueError(f"{self.granularity.value} needs a block_size")
