"""Fixture: the FP8 configuration (upstream's names)."""

import enum
from dataclasses import dataclass

float8_e4m3 = "float8_e4m3fn"


class Format(enum.Enum):
    E4M3 = 1


class ScalingGranularity(enum.Enum):
    TENSORWISE = 1
    BLOCKWISE = 3


@dataclass
class Float8QuantConfig:
    format: Format = Format.E4M3
    granularity: ScalingGranularity = ScalingGranularity.TENSORWISE
    block_size: int | None = None
