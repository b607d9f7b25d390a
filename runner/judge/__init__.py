"""Scoring, gate, audits and transfer checks."""
