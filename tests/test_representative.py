"""Representative shapes: PASS rows only, small + large + high variance, grouped skew."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runner.core.errors import ConfigError
from runner.judge.representative import select_representative


def row(label: str, flops: float, rel_std: float, check: str = "PASS", **kw: Any) -> dict[str, Any]:
    return {"label": label, "check": check, "flops": flops, "rel_std": rel_std, **kw}


def test_small_large_then_highest_variance() -> None:
    rows = [
        row("tiny", 1e6, 0.01),
        row("mid1", 1e9, 0.20),
        row("mid2", 2e9, 0.05),
        row("mid3", 3e9, 0.15),
        row("huge", 1e12, 0.01),
        row("broken", 1e3, 0.90, check="FAIL"),
    ]
    assert select_representative(rows) == ["tiny", "mid1", "mid3", "huge"]


def test_exactly_three_pass_rows() -> None:
    rows = [row("a", 1, 0.1), row("b", 2, 0.1), row("c", 3, 0.1), row("d", 4, 0.1, "FAIL")]
    assert select_representative(rows) == ["a", "b", "c"]


def test_fewer_than_three_pass_rows_is_an_error() -> None:
    rows = [row("a", 1, 0.1), row("b", 2, 0.1), row("c", 3, 0.1, "ERROR")]
    with pytest.raises(ConfigError, match="only 2 PASS shape"):
        select_representative(rows)


def test_ties_are_broken_by_label() -> None:
    rows = [row(x, 5.0, 0.1) for x in "edcba"]
    assert select_representative(rows) == ["a", "b", "c", "d"]
    again = list(reversed(rows))
    assert select_representative(again) == ["a", "b", "c", "d"]


def test_k_bounds() -> None:
    rows = [row(f"s{i}", i, i / 100) for i in range(10)]
    assert len(select_representative(rows, k_min=5)) == 5
    assert len(select_representative(rows, k_max=3)) == 3
    with pytest.raises(ConfigError, match="k_min <= k_max"):
        select_representative(rows, k_min=4, k_max=3)


def test_missing_key_is_named() -> None:
    with pytest.raises(ConfigError, match="lacks \\['rel_std'\\]"):
        select_representative([{"label": "a", "check": "PASS", "flops": 1.0}])


def grouped_rows() -> list[dict[str, Any]]:
    return [
        row("u_small", 1e6, 0.01, distribution="uniform"),
        row("u_large", 1e12, 0.01, distribution="uniform"),
        row("u_mid", 1e9, 0.30, distribution="uniform"),
        row("k2", 1e9, 0.02, distribution="topk2_cf1.0"),
        row("k1", 2e9, 0.03, distribution="topk1_cf1.25"),
        row("k1b", 3e9, 0.05, distribution="topk1_cf1.25"),
        row("deg", 4e9, 0.04, distribution="degenerate"),
    ]


def test_grouped_covers_every_distribution() -> None:
    chosen = select_representative(grouped_rows(), grouped=True)
    assert chosen == ["u_small", "k2", "k1b", "deg", "u_large"]


def test_grouped_fills_by_variance_when_few_distributions() -> None:
    rows = [r for r in grouped_rows() if r["distribution"] in ("uniform", "degenerate")]
    assert select_representative(rows, grouped=True) == ["u_small", "u_mid", "deg", "u_large"]


def test_grouped_needs_uniform_and_skewed() -> None:
    only_uniform = [r for r in grouped_rows() if r["distribution"] == "uniform"]
    with pytest.raises(ConfigError, match="uniform and at least one skewed"):
        select_representative(only_uniform, grouped=True)
    no_uniform = [r for r in grouped_rows() if r["distribution"] != "uniform"]
    with pytest.raises(ConfigError, match="uniform and at least one skewed"):
        select_representative(no_uniform, grouped=True)


def test_grouped_too_small_k_max() -> None:
    with pytest.raises(ConfigError, match="raise k_max to 5"):
        select_representative(grouped_rows(), grouped=True, k_max=4)


def test_grouped_unknown_distribution() -> None:
    rows = [*grouped_rows(), row("x", 1, 0.1, distribution="zipf")]
    with pytest.raises(ConfigError, match="'zipf' is unknown"):
        select_representative(rows, grouped=True)


shape_rows = st.lists(
    st.tuples(
        st.sampled_from(["PASS", "PASS", "FAIL"]),
        st.floats(1.0, 1e15),
        st.floats(0.0, 1.0),
    ),
    min_size=3,
    max_size=20,
)


@given(shape_rows)
def test_properties(specs: list[tuple[str, float, float]]) -> None:
    rows = [row(f"s{i:02d}", f, r, check=c) for i, (c, f, r) in enumerate(specs)]
    passed = [r for r in rows if r["check"] == "PASS"]
    if len(passed) < 3:
        with pytest.raises(ConfigError):
            select_representative(rows)
        return
    chosen = select_representative(rows)
    assert 3 <= len(chosen) <= 5
    assert len(set(chosen)) == len(chosen)
    assert set(chosen) <= {r["label"] for r in passed}
    assert min(passed, key=lambda r: (r["flops"], r["label"]))["label"] in chosen
    assert max(passed, key=lambda r: (r["flops"], r["label"]))["flops"] in {
        r["flops"] for r in passed if r["label"] in chosen
    }
    assert chosen == select_representative(list(reversed(rows)))
