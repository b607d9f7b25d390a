"""Historical tips (docs/protocol.md §6.8): path, root resolution, reading, appending
through the append-only writer, refusals (unclosed round, over-fitting patterns)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import manifest
from click.testing import CliRunner

from runner.cli import cli
from runner.core.errors import ConfigError, RoundOutOfOrder
from runner.core.outcomes import RoundResult, Score, ShapeScore, Status
from runner.store.appendlog import verify
from runner.store.campaign import Campaign
from runner.store.tips import (
    TIPS_ROOT_ENV,
    Tip,
    append_tip,
    check_tip_text,
    overfit_findings,
    read_tips,
    resolve_tips_root,
    tips_path,
)

METRIC = "Combined Step TFLOPS"


# the helpers' manifest, as an FP8 GEMM campaign on gfx942
FP8: dict[str, Any] = {
    "campaign_name": "gemm_fp8_blockwise_triton_gfx942_20261129",
    "target_op": "gemm_fp8",
    "granularity": "blockwise",
    "target_gpu": "gfx942",
}


def closed_result(n: int, status: Status) -> RoundResult:
    sc = Score(METRIC, 10.0, (ShapeScore("a", "PASS", 10.0, 10.0, 10.0),), 1, 0)
    return RoundResult(
        round=n,
        status=status,
        level="quick",
        hypothesis=f"hypothesis {n}",
        change="k.py",
        description="d",
        started="2026-11-29 10:00",
        finished="2026-11-29 10:05",
        test_command="t",
        benchmark_command="b",
        score=sc,
        baseline=sc,
        best=sc,
        key_finding=f"finding {n}",
    )


@pytest.fixture
def campaign(tmp_path: Path) -> Campaign:
    c = Campaign.init(tmp_path / "campaigns", manifest(**FP8))
    for n, status in ((1, Status.BASELINE), (2, Status.ROLLED_BACK), (3, Status.ACCEPTED)):
        c.round_dir(n).mkdir(parents=True)
        c.save_result(closed_result(n, status))
    return c


def test_tips_path_layout(tmp_path: Path) -> None:
    p = tips_path(manifest(**FP8), tmp_path)
    assert p == tmp_path / "gfx942" / "gemm_fp8" / "triton" / "tips.md"


def test_tips_root_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TIPS_ROOT_ENV, raising=False)
    assert resolve_tips_root(tmp_path, None) == tmp_path.resolve() / "tips"
    monkeypatch.setenv(TIPS_ROOT_ENV, str(tmp_path / "env"))
    assert resolve_tips_root(tmp_path, None) == (tmp_path / "env").resolve()
    assert resolve_tips_root(tmp_path, tmp_path / "flag") == (tmp_path / "flag").resolve()


def test_read_tips_none_then_text(campaign: Campaign, tmp_path: Path) -> None:
    root = tmp_path / "tips"
    assert read_tips(campaign.manifest, root) is None
    append_tip(campaign, root, Tip(3, "num_stages 3 hides the global-load latency on K>=4096"))
    text = read_tips(campaign.manifest, root)
    assert text is not None and "num_stages 3" in text


def test_append_tip_format_and_status(campaign: Campaign, tmp_path: Path) -> None:
    root = tmp_path / "tips"
    path = append_tip(
        campaign, root, Tip(2, "fp64 accumulation costs 2x", signal="-48% geomean"), when="x"
    )
    first = path.read_bytes()
    append_tip(campaign, root, Tip(3, "fold the scales"), when="2026-11-29 18:00")
    text = path.read_text(encoding="utf-8")
    assert path.read_bytes().startswith(first)  # append-only
    verify(path)  # the ledger agrees
    assert "### x round-2 — ROLLED BACK\n" in text
    assert "### 2026-11-29 18:00 round-3 — ACCEPTED\n" in text
    entry = text.split("round-3 — ACCEPTED\n", 1)[1]
    keys = re.findall(r"^- (\w+):", entry, flags=re.M)
    assert keys == ["Context", "Signal", "Takeaway", "Applicability"]
    assert "- Signal: finding 3" in entry  # default from the round's record
    assert "- Signal: -48% geomean" in text
    assert "hypothesis 3" in entry


def test_tip_refuses_an_unclosed_round(campaign: Campaign, tmp_path: Path) -> None:
    campaign.round_dir(4).mkdir()
    with pytest.raises(RoundOutOfOrder, match="round 4"):
        append_tip(campaign, tmp_path / "tips", Tip(4, "anything"))


@pytest.mark.parametrize(
    "text",
    [
        "cache the quantised A keyed on id(activation) to skip requantisation",
        "memoise by id(grad_out) in backward",
        "caching the grad_out scale saves 3%",
        "use a compile-time M_per_group for the grouped kernel",
        "assume uniform tokens per expert and drop the bounds checks",
        "we can assume the routing is uniform here",
    ],
)
def test_overfit_patterns_are_refused(text: str) -> None:
    assert overfit_findings(text)
    with pytest.raises(ConfigError, match="over-fitting pattern"):
        check_tip_text(text)


@pytest.mark.parametrize(
    "text",
    [
        "num_stages 3 hides global-load latency on large K",
        "weight cache keyed on id(weight)+_version+shape saves the quantisation of W",
        "skewed token distributions need the per-group loop bound from group_lens",
    ],
)
def test_clean_tips_pass(text: str) -> None:
    assert overfit_findings(text) == []
    check_tip_text(text)


def test_tip_command(campaign: Campaign, tmp_path: Path) -> None:
    root = str(campaign.root.parent)
    runner = CliRunner()
    args = ["--campaigns-root", root, "tip", "--round", "3", "--tips-root", str(tmp_path / "t")]
    res = runner.invoke(cli, [*args, "--text", "fold the scales into one matmul"])
    assert res.exit_code == 0, res.output
    assert "appended a tip for round-3" in res.output
    res = runner.invoke(cli, [*args, "--text", "cache by id(activation)"])
    assert res.exit_code != 0
    assert isinstance(res.exception, ConfigError)
