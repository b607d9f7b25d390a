"""The host owns the numbers the gate reads (runner.measure.host_records): a serving
worker's rows and samples must be the turn medians it reported, the host writes the
files and finds one rewritten after it; a worker leaves with ``os._exit``, so no exit
hook of the measured code runs.  A real paired session writes them in
tests/test_paired.py; a planted cheat is refused in tests/test_redteam.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from runner.core.artifact_names import BENCHMARK_CSV, SAMPLES
from runner.core.csv_io import read_csv
from runner.core.csv_schema import get_schema
from runner.core.errors import Tampered
from runner.core.worker_messages import BlockDone, Finished
from runner.measure.host_records import (
    GUARD,
    TurnTimes,
    check_finished,
    rewritten,
    write_records,
)

TURNS = [(1.0, 2.0), (1.5, 2.5), (1.25, 3.0)]


def _timing(medians: list[float]) -> dict[str, object]:
    blocks = [{"median_ms": m, "samples_ms": [m]} for m in medians]
    return {"samples_ms": medians, "extra": {"blocks": blocks}}


def _finished(scale: float = 1.0) -> Finished:
    """A gemm row and samples of shape ``s1`` over ``TURNS``, times scaled by ``scale``."""
    schema = get_schema("gemm")
    fwd = [t[0] * scale for t in TURNS]
    bwd = [t[1] * scale for t in TURNS]
    row: dict[str, object] = dict.fromkeys(schema.columns, 1.0)
    row.update({"label": "s1", "B": 1, "M": 16, "N": 64, "K": 64, "Check": "PASS"})
    row.update({"Forward Time (ms)": sorted(fwd)[1], "Backward Time (ms)": sorted(bwd)[1]})
    samples = {"shapes": {"s1": {"forward": _timing(fwd), "backward": _timing(bwd)}}}
    return Finished("gemm", (row,), samples)


def _told() -> TurnTimes:
    told = TurnTimes()
    for i, pair in enumerate(TURNS):
        told.add(BlockDone(i, 0.1, 0.0, 0.1, {}, {"s1": pair}))
    return told


def test_rows_and_samples_that_are_the_reported_turns_pass() -> None:
    assert check_finished("pass-01-candidate", _finished(), _told()) == []


def test_a_rescaled_hand_over_is_named_against_the_turns() -> None:
    problems = check_finished("pass-02-candidate", _finished(0.5), _told())
    assert any("row's Forward Time (ms) 0.625 is not the median 1.25" in p for p in problems)
    assert any("samples' backward blocks" in p for p in problems), problems
    missing = Finished("gemm", (), _finished().samples)
    assert check_finished("w", missing, _told()) == [
        "w s1: measured in its turns but no row handed over"
    ]


def test_the_host_writes_the_records_and_finds_them_rewritten(tmp_path: Path) -> None:
    out = tmp_path / "pass-02-candidate"
    out.mkdir()
    write_records(tmp_path, out.name, out, _finished())
    assert read_csv(out / BENCHMARK_CSV).labels() == ["s1"]
    assert rewritten(tmp_path) == []
    (out / SAMPLES).write_text("{}", encoding="utf-8")
    assert rewritten(tmp_path) == [
        f"pass-02-candidate/{SAMPLES} changed after the host wrote it ({GUARD})"
    ]


def test_a_record_the_worker_wrote_itself_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "pass-04-candidate"
    out.mkdir()
    (out / BENCHMARK_CSV).write_text("label\n", encoding="utf-8")
    with pytest.raises(Tampered, match=f"(?s){GUARD}.*wrote {BENCHMARK_CSV} itself") as info:
        write_records(tmp_path, out.name, out, _finished())
    assert info.value.guard == GUARD and len(info.value.problems) == 1


def test_a_worker_leaves_without_running_exit_hooks(tmp_path: Path) -> None:
    """``runner.worker.dispatch.run_and_leave``: the code ``main`` returned (or raised),
    and an ``atexit`` hook the measured code registered never runs."""
    marker = tmp_path / "hook-ran"
    code = (
        "import atexit, runner.worker.dispatch as w\n"
        f"atexit.register(lambda: open({str(marker)!r}, 'w').close())\n"
        "w.main = lambda argv=None: {ret}\n"
        "w.run_and_leave()\n"
    )
    ran = subprocess.run([sys.executable, "-c", code.format(ret="3")], check=False)
    assert ran.returncode == 3 and not marker.exists()
    raising = code.format(ret="(_ for _ in ()).throw(RuntimeError('boom'))")
    ran = subprocess.run([sys.executable, "-c", raising], check=False, capture_output=True)
    assert ran.returncode == 1 and b"boom" in ran.stderr and not marker.exists()
