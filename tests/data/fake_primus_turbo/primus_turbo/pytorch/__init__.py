"""The PyTorch side; loads the compiled extension as upstream does."""

import primus_turbo.pytorch._C  # noqa: F401
