"""Fixture: the focused test (upstream's file name)."""

from primus_turbo.pytorch.core.low_precision import Float8QuantConfig, ScalingGranularity
from primus_turbo.pytorch.ops import gemm_fp8

from tests.pytorch.test_utils import close


def test_gemm_fp8_blockwise():
    config = Float8QuantConfig(granularity=ScalingGranularity.BLOCKWISE, block_size=128)
    out = gemm_fp8([[1.0, 2.0]], [[3.0, 4.0]], trans_b=True, config=config)
    assert close(out[0][0], 11.0)
