"""Basics both sides share: files, timestamps, versioned records."""
