"""Fixture: upstream's benchmark/ops/training/config.py (the models and shapes the
training benchmarks import); never run by these tests."""
