"""Thermal gating (runner.worker.bench.thermal): the worker waits, bounded, for a hot card's
headroom before a timed measurement, from recorded amd-smi samples printed by a stand-in
``amd-smi`` on PATH (a real subprocess), the card matched by PCI bus id."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.executors.gpus import gpu_env
from runner.worker.bench import thermal
from tests.amd_smi_fake import install

HOT = "amd_smi_metric_hot_mi300x.json"  # amd-smi GPU 7 (ROCr GPU 0): hotspot 98 of 100 C
COOL = "amd_smi_metric_mi300x.json"  # amd-smi GPU 7: hotspot 71 C, 29 C of headroom


def _pin(monkeypatch: pytest.MonkeyPatch, gpu: int) -> None:
    for var, value in gpu_env(gpu, "amd").items():
        monkeypatch.setenv(var, value)


def test_headroom_is_the_leased_cards_tightest_sensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path / "bin", monkeypatch, (HOT,))
    _pin(monkeypatch, 0)
    got = thermal.read_headroom(0)
    assert (got.source, got.headroom_c, got.sensor) == ("amd-smi", 2.0, "hotspot")
    _pin(monkeypatch, 1)  # another card of the same sample: cool
    assert thermal.read_headroom(0).headroom_c == 100 - 53


def test_a_hot_card_waits_until_it_is_back_to_the_resume_headroom(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hot, then 2 C under the pause line again, then 40+ C of headroom: resumes."""
    install(tmp_path / "bin", monkeypatch, (HOT, HOT, "amd_smi_metric_resumed_mi300x.json"))
    _pin(monkeypatch, 0)
    done = thermal.wait_for_headroom(0, bound_s=30, poll_s=0.01)
    assert done.start_headroom_c == 2.0 and done.end_headroom_c == 40.0
    assert not done.timed_out and done.waited_s > 0


def test_the_wait_is_bounded_and_recorded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(tmp_path / "bin", monkeypatch, (HOT,))
    _pin(monkeypatch, 0)
    done = thermal.wait_for_headroom(0, bound_s=0.2, poll_s=0.05)
    assert done.timed_out and done.waited_s >= 0.2 and done.end_headroom_c == 2.0
    assert done.to_dict()["timed_out"] is True


def test_between_pause_and_resume_no_wait_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(tmp_path / "bin", monkeypatch, (COOL,))
    _pin(monkeypatch, 0)
    done = thermal.wait_for_headroom(0, bound_s=30)
    assert done.waited_s == 0 and done.start_headroom_c == 100 - 71


def test_no_tool_records_that_headroom_was_not_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    done = thermal.wait_for_headroom(0, bound_s=30)
    assert done.source == "none" and "not checked" in done.error and done.waited_s == 0
