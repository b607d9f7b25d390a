"""The token-distribution generator of grouped-GEMM shapes (runner/core/moe_routing.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.errors import ConfigError
from runner.core.moe_routing import (
    DEGENERATE,
    DISTRIBUTIONS,
    TOPK1_CF125,
    TOPK2_CF1,
    UNIFORM,
    group_sizes,
)

CAPACITY = {TOPK2_CF1: 1.0, TOPK1_CF125: 1.25}


def test_uniform_is_even_and_sums() -> None:
    sizes = group_sizes(UNIFORM, 1030, 8, seed=3)
    assert sum(sizes) == 1030 and max(sizes) - min(sizes) <= 1


def test_degenerate_has_a_hot_expert_and_empty_ones() -> None:
    sizes = group_sizes(DEGENERATE, 4096, 8, seed=0)
    assert sum(sizes) == 4096
    assert max(sizes) >= 4096 / 2
    assert 0 in sizes


@pytest.mark.parametrize("dist", [TOPK2_CF1, TOPK1_CF125])
def test_capacity_distributions_are_skewed_and_capped(dist: str) -> None:
    total, experts = 16384, 8
    sizes = group_sizes(dist, total, experts, seed=0)
    cap = int(CAPACITY[dist] * total / experts)
    assert max(sizes) <= cap
    assert max(sizes) > 1.5 * min(sizes)  # visibly unbalanced
    assert sum(sizes) < total  # overflow dropped
    assert sum(sizes) % experts == 0  # the CSV's per-group M is an integer


def test_seeded_and_deterministic() -> None:
    for dist in DISTRIBUTIONS:
        assert group_sizes(dist, 512, 8, seed=5) == group_sizes(dist, 512, 8, seed=5)
    skewed = [group_sizes(TOPK1_CF125, 512, 8, seed=s) for s in range(4)]
    assert len(set(skewed)) > 1


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="unknown token distribution"):
        group_sizes("zipf", 64, 4)
    with pytest.raises(ConfigError, match="experts >= 1"):
        group_sizes(UNIFORM, 64, 0)


@settings(max_examples=60, deadline=None)
@given(
    dist=st.sampled_from(DISTRIBUTIONS),
    total=st.integers(0, 3000),
    experts=st.integers(1, 40),
    seed=st.integers(0, 2**16),
)
def test_properties(dist: str, total: int, experts: int, seed: int) -> None:
    sizes = group_sizes(dist, total, experts, seed)
    assert len(sizes) == experts
    assert all(isinstance(s, int) and s >= 0 for s in sizes)
    if dist in (UNIFORM, DEGENERATE):
        assert sum(sizes) == total
    else:
        assert sum(sizes) <= total and sum(sizes) % experts == 0
        assert max(sizes) <= int(CAPACITY[dist] * total / experts)
    if dist == DEGENERATE and total:
        assert max(sizes) * 2 >= total
        if experts >= 3:
            assert 0 in sizes
