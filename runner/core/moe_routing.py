"""Tokens per expert for grouped-GEMM (MoE) shapes: a seeded generator of the token
distributions docs/protocol.md §5.6 requires.

``group_sizes(dist, total_tokens, experts, seed)`` returns one row count per expert (the
grouped GEMM's ``group_lens``).  ``total_tokens`` is the number of routed token slots
that reach this rank (tokens * top_k); ``experts`` the experts this rank holds.

* ``uniform``: an even split (the remainder goes one by one to seeded experts); the
  sum is ``total_tokens``.
* ``topk2_cf1.0``: ``total_tokens // 2`` tokens each pick 2 distinct experts from a
  seeded, skewed router popularity; every expert keeps at most
  ``floor(1.0 * total_tokens / experts)`` rows (capacity factor 1.0), overflow is dropped.
* ``topk1_cf1.25``: ``total_tokens`` tokens each pick 1 expert; capacity factor 1.25.
* ``degenerate``: one (seeded) expert holds at least half of the tokens, a seeded
  third of the others (at least one when ``experts >= 3``) hold none, the rest share the
  remainder unevenly; the sum is ``total_tokens``.

The capacity distributions drop tokens, so their sum is below ``total_tokens``; it is
trimmed further (at most ``experts - 1`` rows, from the largest groups) down to a
multiple of ``experts``, so that the CSV's per-group mean ``M = sum / B`` is an integer
and ``6*B*M*N*K`` is exactly the training step's FLOPs (see runner/worker/ops/grouped_gemm.py).
Empty experts are allowed in every skewed distribution.  Pure Python, no torch: the
host builds shape sets with it.
"""

from __future__ import annotations

import random
from functools import lru_cache

from runner.core.errors import ConfigError

UNIFORM = "uniform"
TOPK2_CF1 = "topk2_cf1.0"
TOPK1_CF125 = "topk1_cf1.25"
DEGENERATE = "degenerate"
DISTRIBUTIONS = (UNIFORM, TOPK2_CF1, TOPK1_CF125, DEGENERATE)
# (top_k, capacity factor) of the capacity-limited distributions
_CAPACITY = {TOPK2_CF1: (2, 1.0), TOPK1_CF125: (1, 1.25)}
# Zipf exponent of the router popularity: a visibly skewed, realistic imbalance
_ZIPF = 1.0


def group_sizes(dist: str, total_tokens: int, experts: int, seed: int = 0) -> tuple[int, ...]:
    """Rows per expert for ``dist`` (see the module docstring); deterministic in
    (dist, total_tokens, experts, seed)."""
    if dist not in DISTRIBUTIONS:
        raise ConfigError(f"unknown token distribution {dist!r}; use one of {DISTRIBUTIONS}")
    if experts < 1 or total_tokens < 0:
        raise ConfigError(
            f"need experts >= 1 and total_tokens >= 0 (got {experts}, {total_tokens})"
        )
    return _cached(dist, total_tokens, experts, seed)


@lru_cache(maxsize=512)
def _cached(dist: str, total: int, experts: int, seed: int) -> tuple[int, ...]:
    rng = random.Random(f"{dist}:{total}:{experts}:{seed}")
    if dist == UNIFORM:
        return tuple(_uniform(total, experts, rng))
    if dist == DEGENERATE:
        return tuple(_degenerate(total, experts, rng))
    top_k, cf = _CAPACITY[dist]
    counts = _routed(total // top_k, min(top_k, experts), experts, rng)
    cap = int(cf * total / experts)
    kept = [min(c, cap) for c in counts]
    return tuple(_trim_to_multiple(kept, experts))


def _uniform(total: int, experts: int, rng: random.Random) -> list[int]:
    sizes = [total // experts] * experts
    for i in rng.sample(range(experts), total % experts):
        sizes[i] += 1
    return sizes


def _popularity(experts: int, rng: random.Random) -> list[float]:
    """Zipf weights over the experts in a seeded order."""
    weights = [1.0 / (rank + 1) ** _ZIPF for rank in range(experts)]
    rng.shuffle(weights)
    return weights


def _routed(tokens: int, top_k: int, experts: int, rng: random.Random) -> list[int]:
    """Each token picks ``top_k`` distinct experts with probability ~ popularity."""
    weights = _popularity(experts, rng)
    counts = [0] * experts
    population = range(experts)
    for _ in range(tokens):
        if top_k == 1:
            counts[rng.choices(population, weights)[0]] += 1
            continue
        w = list(weights)
        for _k in range(top_k):
            pick = rng.choices(population, w)[0]
            counts[pick] += 1
            w[pick] = 0.0
    return counts


def _trim_to_multiple(sizes: list[int], experts: int) -> list[int]:
    """Drop ``sum % experts`` rows, one at a time from the currently largest group."""
    excess = sum(sizes) % experts
    for _ in range(excess):
        largest = max(range(len(sizes)), key=lambda i: (sizes[i], -i))
        sizes[largest] -= 1
    return sizes


def _degenerate(total: int, experts: int, rng: random.Random) -> list[int]:
    sizes = [0] * experts
    hot = rng.randrange(experts)
    if experts == 1:
        sizes[hot] = total
        return sizes
    sizes[hot] = total - total // 3  # at least half (two thirds, rounded up)
    others = [i for i in range(experts) if i != hot]
    n_empty = max(1, len(others) // 3) if experts >= 3 else 0
    empty = set(rng.sample(others, n_empty))
    sharing = [i for i in others if i not in empty]
    weights = [rng.random() + 0.05 for _ in sharing]
    rest = total - sizes[hot]
    shares = [int(rest * w / sum(weights)) for w in weights]
    for i, s in zip(sharing, shares, strict=True):
        sizes[i] = s
    sizes[hot] += rest - sum(shares)  # rounding leftovers stay with the hot expert
    return sizes
