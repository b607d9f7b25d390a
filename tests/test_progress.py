"""Progress of the long commands: the events, the estimate, the CLI's two displays."""

from __future__ import annotations

import pickle
import re
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import pytest
from campaign_helpers import QUIET
from rich.console import Console

from runner.cli import main
from runner.cli.progress_view import ProgressView
from runner.flow.new_campaign import EXAMPLES_DIR
from runner.measure.progress import (
    PAIR_SECONDS_FACTOR,
    START_UP_S,
    PairDone,
    PairsPlanned,
    PairWatch,
    StepStarted,
    TurnDone,
    batch_seconds,
    estimate_left,
    fmt_seconds,
    pair_seconds,
)
from runner.store.campaign import Campaign

SHAPES = {"a": 2.0, "b": 1.5, "c": 0.5}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_event_is_its_old_line_of_text() -> None:
    step = StepStarted("round-4", name="pass-01-incumbent")
    assert step == "round-4: pass-01-incumbent" and isinstance(step, str)
    assert step.name == "pass-01-incumbent" and step.text == "pass-01-incumbent"
    assert step.relabel("accept") == "accept: pass-01-incumbent"
    assert "pass-01" in step and step.replace("round-4", "x") == "x: pass-01-incumbent"
    back = pickle.loads(pickle.dumps(step))
    assert isinstance(back, StepStarted) and back.name == step.name
    with pytest.raises(AttributeError):
        _ = step.nothing


def test_the_estimate_comes_from_the_recorded_shape_seconds_then_the_rate() -> None:
    prior = pair_seconds(SHAPES, ["a", "b", "c"], roles=2)
    assert prior == pytest.approx(8.0 * PAIR_SECONDS_FACTOR)  # both workers, every shape
    # one shape without a record (a quick round's unannounced shape) counts as the median
    one = pair_seconds(SHAPES, ["a", "missing"], roles=2)
    assert one == pytest.approx(
        2 * PAIR_SECONDS_FACTOR * (SHAPES["a"] + sorted(SHAPES.values())[1])
    )
    assert pair_seconds(SHAPES, ["a", "missing", "gone"], roles=2) is None
    assert pair_seconds({}, ["a"], roles=2) is None
    # A batch's seconds: before any pair, one start-up and the prior a pair; then the
    # start-up measured and the rate measured without it (none: fresh passes).
    assert batch_seconds(3, 0, None, prior) == pytest.approx(START_UP_S + 3 * prior)
    assert batch_seconds(3, 2, 50.0, prior, [10.0]) == pytest.approx(10.0 + 3 * 20.0)
    assert batch_seconds(3, 4, 80.0, prior, [10.0, 20.0]) == pytest.approx(15.0 + 3 * 12.5)
    assert batch_seconds(3, 2, 50.0, prior) == pytest.approx(75.0)
    assert batch_seconds(3, 0, None, None) is None
    # What is left counts the batch's estimate down, never below 0.
    assert estimate_left(3, 0, 10.0, batch_s=40.0, batch_elapsed_s=10.0) == 30.0
    assert estimate_left(5, 2, 60.0, batch_s=75.0, batch_elapsed_s=5.0) == 70.0
    assert estimate_left(3, 0, 1e3, batch_s=40.0, batch_elapsed_s=1e3) == 0.0
    assert estimate_left(2, 2, 50.0, batch_s=40.0, batch_elapsed_s=50.0) == 0.0
    # No estimate (the baseline, nothing recorded yet): the share of the turns done.
    assert estimate_left(4, 0, 10.0, batch_s=None, turn_fraction=0.25) == pytest.approx(30.0)
    assert estimate_left(4, 0, 10.0, batch_s=None) is None


def test_a_later_batch_is_estimated_at_the_rate_measured_so_far() -> None:
    said: list[str] = []
    clock = Clock()
    watch = PairWatch(said.append, "round-3", roles=2, turns_per_pair=4, prior_s=8.0, clock=clock)
    watch.plan(2)
    clock.now += 10
    watch.turn_done()  # the workers are up: a 10 s start-up
    for _ in range(7):
        clock.now += 2
        watch.turn_done()
    clock.now += 6
    watch.pair_done()
    watch.pair_done()  # 10 s a pair after the start-up
    watch.plan(3)
    assert said[-1].left_s == pytest.approx(10.0 + 30.0)  # type: ignore[attr-defined]
    assert said[-1] == (
        "round-3: measuring 3 pair(s): 2/5 pairs done, 30 s elapsed, about 40 s left"
    )
    clock.now += 10
    watch.turn_done()  # the batch's workers are up
    for _ in range(11):
        clock.now += 2
        watch.turn_done()
    clock.now += 4
    watch.pair_done()  # every turn taken: the other two finish with it
    assert said[-1].left_s == 0.0  # type: ignore[attr-defined]


def test_a_watch_says_pairs_planned_turns_and_readings() -> None:
    said: list[str] = []
    clock = Clock()
    watch = PairWatch(
        said.append,
        "round-5",
        roles=2,
        turns_per_pair=4,
        prior_s=8.0,
        cap_s=150.0,
        reading=lambda paths: 4.25,
        clock=clock,
    )
    watch.plan(2)
    clock.now += 5
    watch.turn_done()
    clock.now += 15
    watch.pair_done([])  # no CSVs: no reading
    watch.pair_done(["inc.csv", "cand.csv"])  # type: ignore[list-item]
    planned, turn, first, second = said
    assert isinstance(planned, PairsPlanned) and planned.left_s == pytest.approx(START_UP_S + 16)
    assert planned == (
        f"round-5: measuring 2 pair(s): 0/2 pairs done, 0 s elapsed, about "
        f"{fmt_seconds(START_UP_S + 16)} left; more pairs only while they fit in 2 min 30 s"
    )
    assert isinstance(turn, TurnDone) and (turn.turns, turn.turns_planned) == (1, 8)
    assert isinstance(first, PairDone) and first.gain_pct is None and first.done == 1
    # one turn of eight in 15 s once the workers were up (5 s): seven more turns, and a
    # start-up (the turns left are a later wave's)
    assert first == "round-5: pair 1/2 done, 20 s elapsed, about 1 min 50 s left"
    assert second.gain_pct == 4.25 and second.left_s == 0.0
    assert second == (
        "round-5: pair 2/2 done: gain +4.25% on this pair, 20 s elapsed, about 0 s left"
    )


def test_a_reading_that_cannot_be_made_is_left_out() -> None:
    said: list[str] = []

    def broken(paths: object) -> float:
        raise ValueError("no such CSV")

    watch = PairWatch(said.append, "round-2", roles=2, turns_per_pair=4, reading=broken)
    watch.plan(1)
    watch.pair_done(["x"])  # type: ignore[list-item]
    assert said[-1].gain_pct is None  # type: ignore[attr-defined]


def feed(view: ProgressView, clock: Clock) -> None:
    watch = PairWatch(view, "round-4", roles=2, turns_per_pair=4, prior_s=10.0, clock=clock)
    view("cleanup: nothing left over")
    view(StepStarted("round-4", name="test-candidate"))
    watch.plan(2)
    clock.now += 4
    watch.turn_done()
    clock.now += 20
    watch.pair_done()
    watch.reading = lambda paths: -1.5
    clock.now += 1
    watch.pair_done(["a", "b"])  # type: ignore[list-item]


def test_plain_progress_is_timestamped_lines_with_only_a_batchs_first_turn() -> None:
    out = StringIO()
    clock = Clock()
    view = ProgressView(console=Console(file=out, width=60), clock=clock, stamp=lambda: "12:00:00")
    assert not view.live_mode
    feed(view, clock)
    view.close()
    assert out.getvalue().splitlines() == [
        "  .. 12:00:00 cleanup: nothing left over",
        "  .. 12:00:00 round-4: test-candidate",
        f"  .. 12:00:00 round-4: measuring 2 pair(s): 0/2 pairs done, 0 s elapsed, about "
        f"{fmt_seconds(START_UP_S + 20)} left",
        f"  .. 12:00:00 round-4: turn 1/8 (0/2 pairs done), 4 s elapsed, about "
        f"{fmt_seconds(START_UP_S + 16)} left",
        "  .. 12:00:00 round-4: pair 1/2 done, 24 s elapsed, about 2 min 24 s left",
        "  .. 12:00:00 round-4: pair 2/2 done: gain -1.50% on this pair, 25 s elapsed, "
        "about 0 s left",
    ]  # one line each however narrow the console: CI logs are grepped


def test_quiet_shows_nothing() -> None:
    out = StringIO()
    clock = Clock()
    view = ProgressView(quiet=True, console=Console(file=out, force_terminal=True), clock=clock)
    feed(view, clock)
    view.close()
    assert out.getvalue() == ""


def test_on_a_terminal_a_live_line_shows_step_pairs_elapsed_estimate_reading() -> None:
    out = StringIO()
    clock = Clock()
    console = Console(file=out, force_terminal=True, width=200, color_system=None)
    with ProgressView(console=console, clock=clock) as view:
        assert view.live_mode
        watch = PairWatch(view, "round-4", roles=2, turns_per_pair=4, prior_s=10.0, clock=clock)
        view(StepStarted("round-4", name="pass-01-incumbent"))
        watch.plan(2)
        clock.now += 3
        watch.turn_done()
        assert view.status_text() == (
            f"round-4: pass-01-incumbent · pairs 0/2 · turn 1/8 · 3 s elapsed · about "
            f"{fmt_seconds(START_UP_S + 17)} left"
        )
        watch.reading = lambda paths: 7.0
        clock.now += 10
        watch.pair_done(["a", "b"])  # type: ignore[list-item]
        clock.now += 2
        assert view.status_text() == (
            "round-4: pass-01-incumbent · pairs 1/2 · turn 1/8 · 15 s elapsed · "
            "about 1 min 11 s left · last pair +7.00%"
        )
        clock.now += 80
        assert "finishing" in view.status_text()
    text = out.getvalue()
    assert "  .. round-4: pass-01-incumbent" in text  # steps print above the line
    assert "round-4: pair 1/2 done: gain +7.00% on this pair" in text
    assert "turn 1/8 (" not in text  # single turns only move the live line
    assert "pairs 0/2 · turn 1/8" in text  # the live line was drawn


# ---- integration: a real round on a session campaign -----------------------------------
@pytest.mark.integration
def test_a_validate_round_shows_pairs_and_an_estimate(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The plain lines of a real round (stderr is no terminal here): the pairs planned
    with an estimate from the baseline's shape seconds, then each pair as it lands.  A
    copy of the session's ``slow_tiny`` (tiny shapes, ``QUIET`` timing), not the demo:
    the lines are the same, its round is shorter."""
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    assert campaign.manifest.shape_seconds, "the baseline records its shape seconds"
    timing = campaign.manifest.timing.model_dump()
    assert {k: timing[k] for k in QUIET} == QUIET  # QUIET
    root = ["--campaigns-root", str(campaign.root.parent)]
    monkeypatch.setenv("TURBO_CAMPAIGN_ROUND_CAP_S", "1")  # the first pairs are final
    patch = EXAMPLES_DIR / "demo_patches" / "slowdown_fp64_accumulate.patch"
    n = campaign.next_round()
    with pytest.raises(SystemExit) as exc:
        main([*root, "validate", "--round", str(n), "--hypothesis", "fp64", "--patch", str(patch)])
    err = capsys.readouterr().err
    assert exc.value.code in (0, 3), err
    lines = [line for line in err.splitlines() if line.startswith("  .. ")]
    stamp = re.compile(r"^  \.\. \d\d:\d\d:\d\d round-\d+: ")
    assert lines and all(stamp.match(line) for line in lines), err
    planned = [line for line in lines if ": measuring 2 pair(s): 0/2 pairs done" in line]
    assert len(planned) == 1 and re.search(r"about (\d+ min )?\d+ s left", planned[0]), err
    done = [line for line in lines if re.search(r"pair [12]/2 done: gain [+-]\d", line)]
    assert len(done) == 2 and "about" in done[0], err
    assert any(line.endswith(f"round-{n}: records") for line in lines), err
    assert "turn 1/8" in err and "turn 2/8" not in err  # only a batch's first turn


def test_acceptance_says_its_events_as_accept() -> None:
    from runner.flow.accept import ACCEPT_ROUND, _prefixed

    said: list[str] = []
    say = _prefixed(said.append)
    say(StepStarted(f"round-{ACCEPT_ROUND}", name="records"))
    say(f"round-{ACCEPT_ROUND}: measurement cap reached at 4 pair(s)")
    step, line = said
    assert isinstance(step, StepStarted) and step == "accept: records" and step.label == "accept"
    assert line == "accept: measurement cap reached at 4 pair(s)"


def test_the_first_turns_rescale_the_estimate_to_the_load_now() -> None:
    """The baseline's shape seconds were measured under some load; the first timed
    turns say how fast the machine is now, before any pair is done."""
    said: list[str] = []
    watch = PairWatch(said.append, "round-2", roles=2, turns_per_pair=4, prior_s=8.0, clock=Clock())
    watch.plan(2)
    prior_turn = 8.0 / PAIR_SECONDS_FACTOR / 4
    watch.turn_done(prior_turn / 2)  # twice as fast as at the baseline
    finish = (PAIR_SECONDS_FACTOR - 1) * 8.0 / PAIR_SECONDS_FACTOR
    expected = 7 * prior_turn / 2 + 2 * finish / 2
    assert said[-1].left_s == pytest.approx(expected)  # type: ignore[attr-defined]
    watch.turn_done(None)  # a turn without its seconds counts, but times nothing
    assert said[-1].left_s == pytest.approx(expected - prior_turn / 2)  # type: ignore[attr-defined]


def test_a_baseline_counts_passes_and_extrapolates_its_turns() -> None:
    """One role, nothing recorded yet: passes, and the share of the turns done."""
    said: list[str] = []
    clock = Clock()
    watch = PairWatch(said.append, "round-1", roles=1, turns_per_pair=1, clock=clock)
    watch.plan(4)
    assert said[-1] == "round-1: measuring 4 pass(s): 0/4 passes done, 0 s elapsed"
    clock.now += 10
    watch.turn_done(2.0)
    assert said[-1] == "round-1: turn 1/4 (0/4 passes done), 10 s elapsed, about 30 s left"
    watch.pair_done()
    assert said[-1].startswith("round-1: pass 1/4 done, 10 s elapsed")
