"""Basics both sides share: errors, subprocesses, statistics, typed outcomes,
shapes, the CSV schema, the round spec, files, timestamps, versioned records."""
