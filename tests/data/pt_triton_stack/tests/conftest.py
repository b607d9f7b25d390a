"""Fixture: upstream's conftest imports only pytest and os at the top."""

import os

import pytest  # noqa: F401

os.environ.setdefault("PRIMUS_TURBO_TEST", "1")
