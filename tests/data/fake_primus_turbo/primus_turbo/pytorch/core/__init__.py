"""Core types."""
