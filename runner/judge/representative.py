"""Choosing the representative shapes at BASELINE (docs/protocol.md §5.6).

Only PASS rows of the baseline count.  The choice, deterministic (ties broken by
label): the smallest shape by FLOPs (launch-overhead-bound), the largest (compute-
or memory-bound), then the shapes with the highest relative stddev of the primary
metric, up to k = 4 (3 when only 3 PASS rows exist; between ``k_min`` and ``k_max``).

Grouped GEMM / MoE: the choice also covers the uniform distribution and every
skewed distribution present (``topk2_cf1.0``, ``topk1_cf1.25``, ``degenerate``),
each by its highest-variance row, before filling by variance.  A uniform row and at
least one skewed row are required.  The result is ordered by FLOPs, then label.
"""

from __future__ import annotations

import math
import random
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TypedDict

from runner.core.errors import ConfigError
from runner.core.shapes import Shape

UNIFORM = "uniform"
SKEWED = ("topk2_cf1.0", "topk1_cf1.25", "degenerate")
DISTRIBUTIONS = (UNIFORM, *SKEWED)
DEFAULT_K = 4


class _BaselineKeys(TypedDict):
    label: str
    check: str
    flops: float
    rel_std: float


class BaselineRow(_BaselineKeys, total=False):
    """One shape of the baseline as the choice reads it (``distribution``: grouped GEMMs
    only)."""

    distribution: str | None


@dataclass(frozen=True)
class _Row:
    label: str
    flops: float
    rel_std: float
    distribution: str | None


def _parse(rows: Sequence[BaselineRow], grouped: bool) -> list[_Row]:
    out: list[_Row] = []
    need = ("label", "check", "flops", "rel_std", *(("distribution",) if grouped else ()))
    for i, r in enumerate(rows):
        missing = [k for k in need if k not in r]
        if missing:
            raise ConfigError(f"baseline row {i} lacks {missing}; each row needs {list(need)}")
        if str(r["check"]).upper() != "PASS":
            continue
        dist = str(r["distribution"]) if grouped else None
        if grouped and dist not in DISTRIBUTIONS:
            raise ConfigError(
                f"row {r['label']!r}: distribution {dist!r} is unknown; use one of "
                f"{', '.join(DISTRIBUTIONS)}"
            )
        rel = float(r["rel_std"])
        out.append(_Row(str(r["label"]), float(r["flops"]), -1.0 if math.isnan(rel) else rel, dist))
    labels = [r.label for r in out]
    dup = sorted({x for x in labels if labels.count(x) > 1})
    if dup:
        raise ConfigError(f"duplicate shape labels {dup}; labels must be unique")
    return out


def _by_variance(rows: Sequence[_Row]) -> list[_Row]:
    return sorted(rows, key=lambda r: (-r.rel_std, r.label))


def _target_k(n_pass: int, k_min: int, k_max: int) -> int:
    if not 1 <= k_min <= k_max:
        raise ConfigError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
    if n_pass < max(3, k_min):
        raise ConfigError(
            f"only {n_pass} PASS shape(s) in the baseline; representative shapes need at "
            f"least {max(3, k_min)}: fix the failing shapes or widen target_shapes"
        )
    return min(max(DEFAULT_K, k_min), k_max, n_pass)


def _grouped_cover(rows: Sequence[_Row], chosen: list[_Row]) -> list[_Row]:
    present = {r.distribution for r in rows}
    if UNIFORM not in present or not present & set(SKEWED):
        raise ConfigError(
            "grouped GEMM representative shapes need a uniform and at least one skewed token "
            f"distribution among the PASS rows (have: {sorted(d for d in present if d)}); "
            f"add shapes with {', '.join(SKEWED)}"
        )
    for dist in DISTRIBUTIONS:
        if dist in present and all(c.distribution != dist for c in chosen):
            chosen.append(_by_variance([r for r in rows if r.distribution == dist])[0])
    return chosen


def select_representative(
    rows: Sequence[BaselineRow],
    *,
    grouped: bool = False,
    k_min: int = 3,
    k_max: int = 5,
) -> list[str]:
    """Labels of the representative shapes (see the module docstring)."""
    passed = _parse(rows, grouped)
    k = _target_k(len(passed), k_min, k_max)
    smallest = min(passed, key=lambda r: (r.flops, r.label))
    largest = min(passed, key=lambda r: (-r.flops, r.label))
    chosen = [smallest] + ([largest] if largest != smallest else [])
    if grouped:
        chosen = _grouped_cover(passed, chosen)
        if len(chosen) > k_max:
            raise ConfigError(
                f"covering small, large and every distribution needs {len(chosen)} shapes "
                f"but k_max is {k_max}; raise k_max to {len(chosen)}"
            )
    for r in _by_variance(passed):
        if len(chosen) >= k:
            break
        if r not in chosen:
            chosen.append(r)
    return [r.label for r in sorted(chosen, key=lambda r: (r.flops, r.label))]


def choose_heldout(flops_by_label: Mapping[str, float]) -> list[str]:
    """Shapes set aside at BASELINE and never shown in quick validation (docs/protocol.md
    §5.7): one per ten shapes, at least one from five shapes on, at most
    three, taken from the middle of the FLOPs order so the smallest and the largest stay
    available as representatives.  Deterministic."""
    ordered = sorted(flops_by_label, key=lambda lb: (flops_by_label[lb], lb))
    n = len(ordered)
    count = 0 if n < 5 else min(3, max(1, n // 10))
    if not count:
        return []
    middle = ordered[1:-1]
    step = len(middle) / (count + 1)
    return sorted({middle[int(step * (i + 1))] for i in range(count)})


def reserve_heldout(shapes: Sequence[Shape], seed: int, targets: Collection[str] = ()) -> list[str]:
    """Shapes of the op's set reserved at ``campaign init`` as held-out (docs/measurement.md
    §5.3): rounds never measure them, ``campaign accept`` judges the final
    best on them.  One per ten shapes, at least one from five shapes on, at most three.
    Candidates: the shapes not in ``targets`` (when given), else every shape but the
    smallest and the largest (they stay available as representatives).  Picked with a
    ``random.Random(seed)`` (the seed is recorded in the manifest), one per class of
    (size, aspect ratio) so that they differ in both from each other."""
    n = len(shapes)
    count = 0 if n < 5 else min(3, max(1, n // 10))
    ordered = sorted(shapes, key=lambda s: (s.flops_fwd, s.label))
    pool = _near_targets(ordered, targets, count) if targets else ordered[1:-1]
    if not count or not pool:
        return []
    rng = random.Random(seed)
    classes: dict[tuple[int, int], list[Shape]] = {}
    for s in pool:
        size = round(math.log2(max(s.flops_fwd, 1.0)))
        aspect = round(math.log2(max(s.m, 1) / max(s.n, 1)))
        classes.setdefault((size, aspect), []).append(s)
    keys = sorted(classes)
    rng.shuffle(keys)
    chosen = [rng.choice(classes[key]).label for key in keys[:count]]
    return sorted(chosen)


# A held-out shape given targets lies within this factor of their forward FLOPs: it is
# judged against its size neighbours among the targets (docs/protocol.md §5.7), and
# final acceptance measures it beside them.  On one H200 (d235dd9, 2026-12-03) a pick
# from the whole model set for four Llama-2-7B mb1 targets (0.14-0.74 TFLOP a forward)
# took shapes of 4.4-15.4 TFLOP, and acceptance's turns grew from 5 s to 16-46 s.
HELDOUT_SIZE_FACTOR = 4.0


def _near_targets(ordered: Sequence[Shape], targets: Collection[str], count: int) -> list[Shape]:
    """The shapes not in ``targets`` whose forward FLOPs lie within
    ``HELDOUT_SIZE_FACTOR`` of the targets' range; when fewer than ``count`` do, the
    nearest ones in log-FLOPs instead."""
    chosen = set(targets)
    sizes = [s.flops_fwd for s in ordered if s.label in chosen]
    rest = [s for s in ordered if s.label not in chosen]
    if not sizes:
        return rest
    lo, hi = min(sizes) / HELDOUT_SIZE_FACTOR, max(sizes) * HELDOUT_SIZE_FACTOR
    near = [s for s in rest if lo <= s.flops_fwd <= hi]
    if len(near) >= count:
        return near

    def distance(s: Shape) -> float:
        f = max(s.flops_fwd, 1.0)
        return max(math.log(lo / f), math.log(f / hi), 0.0)

    return sorted(rest, key=lambda s: (distance(s), s.label))[: max(count, len(near))]
