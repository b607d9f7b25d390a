"""The gate's input checks (``runner.judge.gate``): scores and pairs that cannot be
compared are refused with a ConfigError that says what to fix, before any rule runs."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from runner.core.errors import ConfigError
from runner.core.outcomes import PairSample, Score


def check_sigma(sigma_g: float | None) -> None:
    if sigma_g is not None and not (math.isfinite(sigma_g) and sigma_g >= 0):
        raise ConfigError(
            f"sigma_G must be a non-negative fraction (e.g. 0.004), got {sigma_g!r}; "
            "re-run the BASELINE calibration"
        )


def check_scores(best: Score, candidate: Score) -> None:
    """Both scores must be comparable: same metric, same labels, best all PASS."""
    if best.metric != candidate.metric:
        raise ConfigError(
            f"best is scored on {best.metric!r} but the candidate on "
            f"{candidate.metric!r}; score both with the same metric"
        )
    for name, sc in (("best", best), ("candidate", candidate)):
        labels = [s.label for s in sc.shapes]
        if len(set(labels)) != len(labels) or not labels:
            raise ConfigError(f"the {name} score has no shapes or duplicate labels")
    check_same_labels([s.label for s in best.shapes], candidate.by_label(), "candidate")
    failed = [s.label for s in best.shapes if s.check != "PASS" or not usable(s.value)]
    if failed:
        raise ConfigError(
            f"the best score has FAIL or unusable shapes {failed}; the best must be all "
            "PASS — drop failing shapes from the shape set at BASELINE"
        )


def check_same_labels(want: Sequence[str], have: Mapping[str, object], what: str) -> None:
    missing = [lb for lb in want if lb not in have]
    extra = sorted(lb for lb in have if lb not in set(want))
    if missing or extra:
        raise ConfigError(
            f"the {what} does not cover the same shapes as the best: missing {missing}, "
            f"extra {extra}; measure exactly the best's shape set (no shape may be skipped)"
        )


def check_pairs(pairs: Sequence[PairSample], logs: Mapping[str, float]) -> None:
    labels = list(logs)
    for i, pair in enumerate(pairs, start=1):
        for side, values in (("incumbent", pair.incumbent), ("candidate", pair.candidate)):
            check_same_labels(labels, values, f"pair {i} ({side})")
            bad = [lb for lb, v in values.items() if not usable(v)]
            if bad:
                raise ConfigError(
                    f"pair {i} ({side}) has non-positive or non-finite values for {bad}; "
                    "re-measure that pair"
                )


def usable(value: float | None) -> bool:
    return value is not None and math.isfinite(value) and value > 0


def positive(value: float | None) -> float:
    if value is None or not usable(value):
        raise ConfigError(f"a PASS shape has no usable value ({value!r}); re-score the CSV")
    return value
