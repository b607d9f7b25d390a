"""Fixture: the package root (upstream guards its generated version file)."""

try:
    from ._version import version as __version__
except Exception:
    __version__ = "0.0.0.dev0"
