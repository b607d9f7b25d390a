"""Fixture: expert parallelism, compiled."""

from primus_turbo.pytorch._C.deep_ep import Config  # noqa: F401
