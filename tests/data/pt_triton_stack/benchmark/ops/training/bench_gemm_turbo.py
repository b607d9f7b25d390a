"""Fixture: upstream's benchmark path (never run by these tests)."""
