"""Fixture: upstream's core package imports its stream (compiled runtime)."""

from .stream import TurboStream  # noqa: F401
