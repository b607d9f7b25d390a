"""Fixture: a Primus-Turbo-shaped package (see README.md)."""
