"""Small statistics shared by scoring, the gate, calibration and the records."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def geomean(values: Iterable[float]) -> float:
    """Geometric mean of positive values; 0.0 for an empty input or any value <= 0."""
    vals = list(values)
    if not vals or any(v <= 0 or math.isnan(v) for v in vals):
        return 0.0
    if len(vals) == 1:
        return vals[0]  # one shape: its own value, exactly
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def stdev(values: Sequence[float]) -> float:
    """Sample standard deviation (n-1); 0.0 for fewer than two values."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of an empty sequence")
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def rel_stdev(values: Sequence[float]) -> float:
    """Relative sample standard deviation (stdev / mean); 0.0 when undefined."""
    if len(values) < 2:
        return 0.0
    m = mean(values)
    return stdev(values) / m if m else 0.0
