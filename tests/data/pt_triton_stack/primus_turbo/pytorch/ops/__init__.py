"""Fixture: every op, star-imported."""

from .attention import *  # noqa: F403
from .gemm_fp8 import *  # noqa: F403
