"""The campaign directory: layout, init, load, find, the lock, closed rounds."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from campaign_helpers import manifest

from runner.core.errors import CampaignNotFound, ConfigError, RecordDamaged, RoundOutOfOrder
from runner.core.outcomes import RoundResult, Score, ShapeScore, Status
from runner.store.appendlog import verify
from runner.store.campaign import Campaign
from runner.store.log_format import TREND_HEADER, TREND_SEPARATOR

NAME = "gemm_triton_cpu_20261129"


def result(n: int, status: Status, agg: float = 10.0) -> RoundResult:
    score = Score("Combined Step TFLOPS", agg, (ShapeScore("a", "PASS", agg, agg, agg),), 1, 0)
    return RoundResult(
        round=n,
        status=status,
        level="full" if n == 1 else "quick",
        hypothesis="h",
        change="c",
        description="d",
        started="2026-11-29 14:05",
        finished="2026-11-29 14:35",
        test_command="pytest tests -q",
        benchmark_command="python bench.py",
        score=score,
        baseline=score,
        best=None if n == 1 else score,
    )


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def camp(tmp_path: Path) -> Campaign:
    return Campaign.init(tmp_path / "campaigns", manifest())


def test_init_creates_the_layout(camp: Campaign, tmp_path: Path) -> None:
    root = tmp_path / "campaigns" / NAME
    assert camp.root == root
    for d in (camp.profiles_dir, camp.rounds_dir, camp.optimize_log.parent):
        assert d.is_dir()
    assert camp.manifest_path.is_file()
    assert camp.quick_script == root / "quick_test_bench.py"
    assert camp.manifest.quick_command == f"python {root / 'quick_test_bench.py'}"
    assert camp.round_dir(3) == root / "rounds" / "round-3"
    assert camp.snapshot_dir(3) == root / "rounds" / "round-3" / "kernel_snapshot"
    assert camp.artifacts_dir(3) == root / "rounds" / "round-3" / "artifacts"
    assert camp.artifacts_dir(3) == root / "rounds" / "round-3" / "artifacts"
    assert camp.summary_path(3) == root / "rounds" / "round-3" / "summary.md"
    trend = camp.trend_log.read_text()
    assert f"\n{TREND_HEADER}\n{TREND_SEPARATOR}\n" in trend
    assert trend.endswith(f"{TREND_SEPARATOR}\n")
    assert camp.optimize_log.read_text().startswith(f"# Optimization log — {NAME}\n")
    verify(camp.trend_log)
    verify(camp.optimize_log)
    assert not [p for p in (tmp_path / "campaigns").iterdir() if p.name.startswith(".")]


def test_init_refuses_to_overwrite_and_changes_nothing(camp: Campaign, tmp_path: Path) -> None:
    (camp.round_dir(1)).mkdir()
    (camp.round_dir(1) / "summary.md").write_text("keep me")
    before = tree(camp.root)
    mtimes = {p: p.stat().st_mtime_ns for p in camp.root.rglob("*")}
    other = manifest(test_command="something else")
    for force in (False, True):
        with pytest.raises(ConfigError, match="already exists"):
            Campaign.init(tmp_path / "campaigns", other, force=force)
    assert tree(camp.root) == before
    assert {p: p.stat().st_mtime_ns for p in camp.root.rglob("*")} == mtimes


def test_init_refuses_an_existing_plain_directory_without_force(tmp_path: Path) -> None:
    (tmp_path / NAME).mkdir()
    (tmp_path / NAME / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="already exists"):
        Campaign.init(tmp_path, manifest())
    c = Campaign.init(tmp_path, manifest(), force=True)
    assert c.manifest_path.is_file()
    assert (tmp_path / NAME / "notes.txt").read_text() == "mine"


def test_load_by_name_and_by_path(camp: Campaign, tmp_path: Path) -> None:
    by_name = Campaign.load(NAME, tmp_path / "campaigns")
    by_path = Campaign.load(camp.root)
    assert by_name.root == by_path.root == camp.root
    assert by_name.manifest == camp.manifest


def test_load_missing_campaign(tmp_path: Path) -> None:
    with pytest.raises(CampaignNotFound, match="campaign init"):
        Campaign.load("nope", tmp_path)


def test_load_rejects_a_renamed_directory(camp: Campaign, tmp_path: Path) -> None:
    moved = camp.root.with_name("renamed")
    camp.root.rename(moved)
    with pytest.raises(ConfigError, match="differs from its directory 'renamed'"):
        Campaign.load(moved)


def test_find(tmp_path: Path) -> None:
    root = tmp_path / "campaigns"
    with pytest.raises(CampaignNotFound, match="campaign init"):
        Campaign.find(root)
    Campaign.init(root, manifest())
    assert Campaign.find(root).name == NAME
    Campaign.init(root, manifest(campaign_name="other"))
    with pytest.raises(CampaignNotFound, match=f"{NAME}, other; name one"):
        Campaign.find(root)
    assert Campaign.find(root, "other").name == "other"


def test_lock_is_exclusive_and_fails_fast(camp: Campaign) -> None:
    second = Campaign.load(camp.root)
    assert camp.lock_holder() is None
    with camp.lock():
        assert camp.lock_path.read_text().splitlines()[0] == str(os.getpid())
        holder = camp.lock_holder()  # what `campaign status` shows as running
        assert holder is not None and holder.pid == os.getpid() and holder.started
        start = time.monotonic()
        with pytest.raises(ConfigError) as info, second.lock():
            pass
        assert time.monotonic() - start < 1.0
        assert f"campaign {NAME} is busy (pid {os.getpid()})" in str(info.value)
        assert f"(`{holder.command}`)" in str(info.value)
        with camp.lock():  # re-entrant on the same object
            pass
    assert camp.lock_holder() is None and camp.lock_path.read_text() == ""
    with second.lock():  # released
        pass


def test_a_dead_holder_is_not_running(camp: Campaign) -> None:
    """A command killed with SIGKILL leaves its pid in the lock file (the kernel drops
    the flock): status must not call it running."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    camp.lock_path.write_text(f'{dead.pid}\n{{"command": "campaign validate"}}\n')
    assert camp.lock_holder() is None
    camp.lock_path.write_text(f'{os.getpid()}\n{{"command": "campaign validate --round 4"}}\n')
    holder = camp.lock_holder()
    assert holder is not None and holder.command == "campaign validate --round 4"


def test_save_and_load_result(camp: Campaign) -> None:
    r = result(1, Status.BASELINE)
    camp.save_result(r)
    data = json.loads(camp.result_path(1).read_text())
    assert data["schema_version"] == 1
    assert camp.load_result(1) == r


def test_load_result_rejects_other_versions(camp: Campaign) -> None:
    camp.save_result(result(1, Status.BASELINE))
    data = json.loads(camp.result_path(1).read_text())
    data["schema_version"] = 2
    camp.result_path(1).write_text(json.dumps(data))
    with pytest.raises(RecordDamaged, match="schema_version 2"):
        camp.load_result(1)
    with pytest.raises(RoundOutOfOrder):
        camp.load_result(9)


def test_rounds_bookkeeping(camp: Campaign) -> None:
    assert camp.closed_rounds() == []
    assert camp.next_round() == 1
    assert camp.last_accepted() is None
    camp.save_result(result(1, Status.BASELINE, 10.0))
    camp.save_result(result(2, Status.ACCEPTED, 11.0))
    camp.save_result(result(3, Status.ROLLED_BACK, 9.0))
    camp.round_dir(4).mkdir()  # open, not closed
    (camp.round_dir(4) / "summary.md").write_text("in progress")
    assert camp.closed_rounds() == [1, 2, 3]
    assert camp.next_round() == 4
    best = camp.last_accepted()
    assert best is not None
    assert best.round == 2
    assert [r.status for r in camp.results()] == [
        Status.BASELINE,
        Status.ACCEPTED,
        Status.ROLLED_BACK,
    ]


def test_round_numbers_start_at_one(camp: Campaign) -> None:
    with pytest.raises(RoundOutOfOrder):
        camp.round_dir(0)
