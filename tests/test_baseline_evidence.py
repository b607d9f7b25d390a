"""A failed baseline keeps its passes' evidence, and a retry never erases it."""

from __future__ import annotations

from pathlib import Path

from runner.core.csv_schema import Row
from runner.flow.baseline import _clear_interrupted, _keep_passes, _what_was_recorded


def _pass(tmp: Path, name: str) -> Path:
    folder = tmp / "scratch" / name
    folder.mkdir(parents=True)
    (folder / "benchmark.csv").write_text("label,Check\ns1,FAIL\n")
    (folder / "worker.log").write_text("ERROR shape s1 failed a check\n")
    return folder / "benchmark.csv"


def test_the_passes_are_kept_as_an_attempt_and_a_retry_keeps_them(tmp_path: Path) -> None:
    round_dir = tmp_path / "rounds" / "round-1"
    paths = [_pass(tmp_path, "pass-01-baseline"), _pass(tmp_path, "pass-02-baseline")]
    (tmp_path / "scratch" / "round.log").write_text("the round's log\n")
    first = _keep_passes(round_dir, paths)
    assert first == round_dir / "attempts" / "attempt-1"
    assert (first / "pass-02-baseline" / "worker.log").read_text().startswith("ERROR")
    assert (first / "round.log").is_file()
    (round_dir / "leftover.csv").write_text("an interrupted attempt's file\n")
    _clear_interrupted(round_dir)
    assert not (round_dir / "leftover.csv").exists()
    assert (first / "pass-01-baseline" / "benchmark.csv").is_file()
    assert _keep_passes(round_dir, paths).name == "attempt-2"


def test_the_error_says_what_the_pass_recorded_for_a_target() -> None:
    row = Row({"label": "s1", "Check": "FAIL", "out_snr": "28.6"})
    assert _what_was_recorded(row) == "check FAIL (Check=FAIL, out_snr=28.6)"
    assert _what_was_recorded(None) == "no row in the pass's CSV"
