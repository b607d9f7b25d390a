"""Fixture: imports the compiled extension and the whole package, as upstream's does."""

import primus_turbo.pytorch._C
import primus_turbo.pytorch.deep_ep
import primus_turbo.pytorch.ops  # noqa: F401
from primus_turbo.pytorch.core import low_precision

float8_e4m3 = low_precision.float8_e4m3
