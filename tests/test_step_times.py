"""The step recorder (``runner.core.step_times``): spans from one origin, overlap kept
visible, the record through result.json, the summary's three largest and
``campaign status --json``; and ``benchmarks/step_table.py`` over recorded rounds."""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from pathlib import Path

import pytest
from test_status import chain, result

from runner.core.outcomes import RoundResult, Status
from runner.core.step_times import StepTime, StepTimes, read_step_times, union_seconds
from runner.render.status import summarise
from runner.render.summary import render_summary


def test_a_step_is_its_span_from_the_recorders_start_also_when_it_raises() -> None:
    times = StepTimes()
    with times.step("build"):
        time.sleep(0.05)
    with pytest.raises(ValueError), times.step("focused test"):
        raise ValueError("failed")
    build, test = times.steps
    assert build.name == "build" and 0.04 < build.seconds < 1.0
    assert test.name == "focused test" and test.start_s >= build.end_s


def test_steps_beside_each_other_keep_their_overlap_and_are_not_summed() -> None:
    times = StepTimes()
    gate = threading.Event()

    def beside() -> None:
        with times.step("focused test", beside="worker start-up"):
            gate.wait(5)

    thread = threading.Thread(target=beside)
    thread.start()
    with times.step("worker start-up"):
        time.sleep(0.1)
        gate.set()
    thread.join()
    test = next(s for s in times.steps if s.name == "focused test")
    start = next(s for s in times.steps if s.name == "worker start-up")
    assert test.beside == "worker start-up" and test.start_s < start.end_s
    both = union_seconds(times.steps)
    assert both < test.seconds + start.seconds  # overlap counted once
    assert both == pytest.approx(
        max(s.end_s for s in times.steps) - min(s.start_s for s in times.steps)
    )


def test_largest_puts_a_steps_repeats_together() -> None:
    times = StepTimes(
        [
            StepTime("turns", 0, 2),
            StepTime("judge", 2, 3),
            StepTime("turns", 3, 6),
            StepTime("records", 6, 6.5),
            StepTime("build", 0, 0.1),
        ]
    )
    assert times.largest(3) == [("turns", 5.0), ("judge", 1.0), ("records", 0.5)]


def test_finish_is_a_copy_with_its_wall_time() -> None:
    times = StepTimes()
    with times.step("a"):
        pass
    done = times.finish()
    with times.step("b"):
        pass
    assert [s.name for s in done.steps] == ["a"] and done.wall_s >= done.steps[0].end_s
    again = StepTimes.from_dict(json.loads(json.dumps(done.to_dict())))
    assert [s.name for s in again.steps] == ["a"]
    assert again.wall_s == pytest.approx(done.wall_s, abs=1e-3)
    assert read_step_times({}) is None and read_step_times(None) is None


def timed(r: RoundResult, *steps: StepTime, wall: float = 10.0) -> RoundResult:
    return dataclasses.replace(r, step_times=StepTimes(list(steps), wall))


def test_a_results_step_times_go_through_result_json() -> None:
    r = timed(result(2, Status.ACCEPTED), StepTime("focused test", 1, 4, "worker start-up"))
    back = RoundResult.from_dict(json.loads(json.dumps(r.to_dict())))
    assert back.step_times is not None and back.step_times.steps == r.step_times.steps
    older = result(2, Status.ACCEPTED).to_dict()
    assert "step_times" not in older and RoundResult.from_dict(older).step_times is None


def test_the_summary_shows_the_three_largest_steps_and_what_ran_beside() -> None:
    from test_records import manifest

    r = timed(
        result(2, Status.ACCEPTED),
        StepTime("turns", 5, 9),
        StepTime("focused test", 1, 4, "worker start-up"),
        StepTime("worker start-up", 1, 3),
        StepTime("records", 9, 9.2),
    )
    text = render_summary(r, manifest())
    part = text.split("## Where the time went")[1]
    assert "* turns: 4.0 s (40%)" in part
    assert "* focused test: 3.0 s (30%), beside worker start-up" in part
    assert "* worker start-up: 2.0 s" in part and "* records" not in part
    assert "## Where the time went" not in render_summary(result(2, Status.ACCEPTED), manifest())


def test_status_json_carries_the_baselines_and_the_last_rounds_step_times() -> None:
    base, *rest = chain(Status.ROLLED_BACK, Status.ACCEPTED)
    rounds = [
        timed(base, StepTime("passes", 0, 5)),
        rest[0],
        timed(rest[1], StepTime("turns", 1, 2)),
    ]
    doc = summarise("c", "/r", rounds).to_dict()["step_times"]
    assert doc["baseline"]["steps"][0]["name"] == "passes"
    assert doc["last_round"]["steps"][0]["name"] == "turns"
    assert summarise("c", "/r", chain(Status.ACCEPTED)).to_dict()["step_times"] == {}


def test_the_step_table_puts_every_rounds_steps_in_one_row_per_step(tmp_path: Path) -> None:
    import importlib.util
    import sys

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "step_table.py"
    spec = importlib.util.spec_from_file_location("step_table", path)
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    sys.modules["step_table"] = table
    spec.loader.exec_module(table)
    rounds = [
        timed(
            result(2, Status.ACCEPTED), StepTime("turns", 2, 6), StepTime("build", 0, 2), wall=10
        ),
        timed(
            result(3, Status.ROLLED_BACK), StepTime("turns", 1, 9), StepTime("build", 0, 1), wall=20
        ),
    ]
    rows = table.step_rows([r.step_times for r in rounds if r.step_times])
    turns = next(row for row in rows if row.name == "turns")
    assert (turns.median_s, turns.min_s, turns.max_s) == (6.0, 4.0, 8.0)
    assert turns.share == pytest.approx((0.4 + 0.4) / 2)
    text = table.markdown(rows, 2, [10.0, 20.0], "rounds", [4.0, 8.0])
    assert "| turns | 6.0 | 4.0 | 8.0 | 40% |" in text
    assert "median 2.50x" in text


# ---- the real paths: the session's demo campaign ---------------------------------------
ROUND_STEPS = {
    "checks before the round",
    "lease and scratch folder",
    "worktrees",
    "audit",
    "focused-test-candidate",
    "tamper check: trees before",
    "worker launch",
    "worker start-up",
    "ready checks",
    "turns",
    "fresh steps",
    "re-checks and finish",
    "judge",
    "tamper check: trees and loaded files after",
    "kernel facts compile",
    "wait for the kernel facts",
    "records",
}


@pytest.mark.integration
def test_the_demos_rounds_record_every_step_on_their_real_paths(demo_campaign: Path) -> None:
    """Each demo round's result.json names its steps, in one clock: the kernel facts'
    compile overlaps the round (it runs beside it), the rest follow one another, and the
    summary names the largest."""
    for n in (2, 3):
        doc = json.loads((demo_campaign / "rounds" / f"round-{n}" / "result.json").read_text())
        times = StepTimes.from_dict(doc["step_times"])
        names = {s.name for s in times.steps}
        assert names >= ROUND_STEPS, names
        facts = next(s for s in times.steps if s.name == "kernel facts compile")
        first_turn = min(s.start_s for s in times.steps if s.name == "turns")
        assert facts.beside == "the round" and facts.start_s < first_turn
        assert all(0 <= s.start_s <= s.end_s <= times.wall_s for s in times.steps)
        summary = (demo_campaign / "rounds" / f"round-{n}" / "summary.md").read_text()
        name, _ = times.largest(1)[0]
        assert f"* {name}: " in summary.split("## Where the time went")[1]
