"""docs/reliability.md §9, the newcomer's ``make demo`` on a busy 2-core machine: a verdict too
noisy to tell says so (``runner.judge.inconclusive``), progress agrees with what
happens, one unit per metric, one "current best".

Most tests drive the rules with recorded figures (the issue's own) on a campaign that
never measures; one round on a ``slow_tiny`` copy is judged at a planted noisy
baseline's threshold."""

from __future__ import annotations

import math
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import SLOW_KERNEL, manifest, run_cli

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.outcomes import (
    Decision,
    GateResult,
    PairedEvidence,
    RoundResult,
    Score,
    ShapeScore,
    Status,
)
from runner.judge.inconclusive import inconclusive
from runner.round.logs import close_round
from runner.store.campaign import Campaign

METRIC = "Combined Step TFLOPS"


def _gate(
    mean: float,
    half: float | None,
    pairs: int,
    *,
    threshold: float = 27.9,
    decision: Decision = Decision.ROLLED_BACK,
    shapes: dict[str, Any] | None = None,
    each: tuple[float, ...] = (),
) -> GateResult:
    """A recorded gate with paired evidence (percent, as result.json holds it); ``each``:
    every pair's gain."""
    gain = {"mean_pct": mean, "half_width_pct": half, "spread_pct": 8.1, "pairs": pairs}
    evidence = {"gain": gain, "shapes": shapes or {"a": gain}, "remeasure_size": 23}
    return GateResult(
        decision,
        METRIC,
        0.0075,
        0.0075 * (1 + mean / 100),
        mean,
        (),
        (),
        ("too volatile to tell: ...",),
        threshold_pct=threshold,
        pairs_used=pairs,
        evidence=PairedEvidence.from_dict(evidence),
        pair_gains_pct=each,
    )


def test_the_demo_speed_up_on_a_busy_machine_is_inconclusive_not_no_gain() -> None:
    """The issue's figures: +5.88% ± 5.87% over 12 pairs, sigma_G 9.3% (threshold 27.9%)."""
    noisy = inconclusive(_gate(5.88, 5.87, 12))
    assert noisy is not None
    centre = math.log1p(0.0588)
    assert noisy.low_pct == pytest.approx(100 * math.expm1(centre - 0.0587))
    assert noisy.high_pct == pytest.approx(100 * math.expm1(centre + 0.0587))
    line = noisy.line()
    assert "inconclusive" in line and "too noisy to tell" in line, line
    assert "+5.88% ± 5.87% over 12 pairs" in line and "sigma_G 9.30%" in line, line
    assert "27.90%" in line and "-0.16% to +12.28%" in line, line


@pytest.mark.parametrize(
    ("gate", "why"),
    [
        (_gate(-23.2, 3.0, 12, threshold=7.5), "a real slow-down: the interval is far below 2%"),
        (_gate(0.1, 0.5, 6, threshold=2.0), "an A/A on a quiet machine: no gain, shown so"),
        (_gate(13.2, 6.0, 6, decision=Decision.ACCEPTED), "accepted"),
        (_gate(5.88, None, 1), "one pair: no interval"),
        (
            # the demo's slow-down at 9d73f9a (2026-12-03): both pairs beyond the
            # threshold, the gate's early rule, though 2 pairs make a wide interval
            _gate(-23.48, 30.57, 2, threshold=18.85, each=(-25.30, -21.61)),
            "every pair a slow-down beyond the threshold",
        ),
        (
            _gate(4.0, 5.0, 12, shapes={"a": {"mean_pct": -20.0, "half_width_pct": 3.0}}),
            "a shape clearly 5% slower is a finding",
        ),
    ],
)
def test_what_is_not_inconclusive(gate: GateResult, why: str) -> None:
    assert inconclusive(gate) is None, why


def _closed(c: Campaign, n: int, status: Status, gate: GateResult | None = None) -> RoundResult:
    value = 0.0075
    score = Score(METRIC, value, (ShapeScore("a", "PASS", value, value, value),), 1, 0)
    c.snapshot_dir(n).mkdir(parents=True)
    (c.snapshot_dir(n) / "kernel.py").write_text("pass\n")
    result = RoundResult(
        round=n,
        status=status,
        level="quick",
        hypothesis="h",
        change="c",
        description="d",
        started="2026-12-03 17:30",
        finished="2026-12-03 17:40",
        test_command="pytest tests -q",
        benchmark_command="python bench.py",
        score=score,
        baseline=score,
        best=None if n == 1 else score,
        gate=gate,
        reasons=list(gate.reasons) if gate else [],
    )
    close_round(c, result)
    return result


def test_output_summary_and_status_say_too_noisy_to_tell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The round's output, its summary.md and `status` name the verdict for what it is,
    with the figures and what to do; a clear slow-down's do not."""
    from runner.cli.validate_cmd import print_result

    c = Campaign.init(tmp_path / "campaigns", manifest())
    _closed(c, 1, Status.BASELINE)
    slow = _closed(c, 2, Status.ROLLED_BACK, _gate(-23.2, 3.0, 12))
    noisy = _closed(c, 3, Status.ROLLED_BACK, _gate(5.88, 5.87, 12))
    capsys.readouterr()
    print_result(slow, c)
    assert "too noisy" not in capsys.readouterr().out
    print_result(noisy, c)
    out = capsys.readouterr().out
    assert "too noisy to tell" in out and "sigma_G 9.30%" in out, out
    assert "close other work" in out and "--pairs" in out, out
    summary = c.summary_path(3).read_text("utf-8")
    assert "Too noisy to tell" in summary and "+5.88% ± 5.87% over 12 pairs" in summary
    assert "too noisy" not in c.summary_path(2).read_text("utf-8")
    code, status = run_cli(["--campaigns-root", str(tmp_path / "campaigns"), "status"], capsys)
    assert code == 0, status
    assert "ROLLED_BACK (too noisy to tell)" in status, status
    assert "round-3 ROLLED BACK: inconclusive" in status and "close other work" in status
    assert "round-2 ROLLED BACK: inconclusive" not in status, status


@pytest.mark.integration
def test_a_round_judged_at_a_busy_baselines_threshold_says_it_could_not_tell(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """End to end on a ``slow_tiny`` copy: its sigma_G set to 50% as a recorded change
    (a baseline measured on a machine as busy as the issue's, made far noisier: the
    threshold is 150%), then its real ~1.6x speed-up measured on one block (two pairs,
    final at once).  Far below the threshold and too few pairs for the near-noise rule,
    it rolls back; its two-pair interval holds both no gain and a gain worth accepting,
    and the output, summary.md and `status` say so (the other rounds of the suite's
    session campaigns are clear, so none of them shows the note)."""
    monkeypatch.setenv(ROUND_CAP_ENV, "1")  # the first pairs are final
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    root = ["--campaigns-root", str(campaign.root.parent)]
    code, out = run_cli(
        [*root, "set", "sigma_g", "0.5", "--reason", "the baseline as a busy machine measures it"],
        capsys,
    )
    assert code == 0, out
    patch = slow_tiny / "speedup.patch"
    n = campaign.next_round()
    code, out = run_cli(
        [
            *root,
            "validate",
            "--round",
            str(n),
            "--hypothesis",
            "the waste removed",
            "--patch",
            str(patch),
            "--pairs",
            "1",
            "--quiet",
        ],
        capsys,
    )
    assert code == 3, out
    assert f"round-{n}: ROLLED BACK" in out and "too noisy to tell" in out, out
    assert "sigma_G 50.00%" in out and "150.00%" in out and "close other work" in out, out
    summary = campaign.summary_path(n).read_text("utf-8")
    assert "Too noisy to tell" in summary, summary
    assert "not shown ineffective" in summary and "as ineffective" not in summary, summary
    code, status = run_cli([*root, "status"], capsys)
    assert f"round-{n} ROLLED BACK: inconclusive" in status, status
    _the_same_code_again_is_judged_against_the_budget(campaign, root, patch, n, capsys)


def _the_same_code_again_is_judged_against_the_budget(
    campaign: Campaign, root: list[str], patch: Path, n: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rolled-back speed-up with a comment added, on a threshold set back to 2%: a
    resubmission, refused without --resubmit (Rule 7); with it the gate's accepting
    reading of a change this large is judged against what is left of the false-accept
    budget, which on two pairs either keeps it or rolls it back by the noise they read:
    either way the round says which (tests/test_false_accept.py pins both)."""
    source = Path(campaign.manifest.source)
    git = ["git", "-C", str(source)]
    subprocess.run([*git, "apply", str(patch)], check=True)
    with (source / SLOW_KERNEL).open("a", encoding="utf-8") as kernel:
        kernel.write("# the weight is quantised once\n")
    again = subprocess.run([*git, "diff"], check=True, capture_output=True, text=True).stdout
    subprocess.run([*git, "checkout", "-q", "--", "."], check=True)
    (source.parent / "again.patch").write_text(again, encoding="utf-8")
    code, out = run_cli([*root, "set", "sigma_g", "0.005", "--reason", "a quiet machine"], capsys)
    assert code == 0, out
    argv = [*root, "validate", "--round", str(n + 1), "--hypothesis", "the waste removed again"]
    argv += ["--patch", str(source.parent / "again.patch"), "--pairs", "1", "--quiet"]
    code, out = run_cli(argv, capsys)
    assert code == 2 and f"round-{n}'s rolled-back code again" in out, out
    code, out = run_cli([*argv, "--resubmit"], capsys)
    assert code in (0, 3), out
    reasons = campaign.load_result(n + 1).reasons
    said = [r for r in reasons if f"resubmission of round-{n}'s code" in r]
    assert len(said) == 1, reasons
    kept = "fits in the" in said[0]
    assert kept == (code == 0) and (kept or said[0].startswith("ROLLED BACK as a resub")), said


# ---- progress agrees with what happens -------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_cap_says_what_it_caps(monkeypatch: pytest.MonkeyPatch) -> None:
    """ "capped at 2 min 30 s" while round 3 measured for 5 min 16 s: the seconds only
    stop more pairs being planned, and the pair floors (12, 24 while promising) are
    measured however long they take.  The line says both."""
    from runner.compare.loop import measurement_cap
    from runner.measure.progress import PairWatch

    monkeypatch.delenv(ROUND_CAP_ENV, raising=False)  # the product's cap, not the suite's
    said: list[str] = []
    cap = measurement_cap("quick")
    watch = PairWatch(
        said.append,
        "round-3",
        roles=2,
        turns_per_pair=4,
        cap_s=cap.seconds,
        cap_pairs=cap.pairs,
        cap_promising=cap.promising,
    )
    watch.plan(2)
    assert said[-1].endswith(
        "; more pairs only while they fit in 2 min 30 s or until 12 pairs are in "
        "(24 while the gain's interval lies above 1%)"
    ), said[-1]
    assert "capped at" not in said[-1]


def test_pairs_of_a_wave_count_the_pairs_of_the_next_waves() -> None:
    """Twelve pairs in waves of eight and four (a CPU round), the first estimate short:
    the first wave's eight pairs land in one second and each said "about 0 s left".
    Each now counts the four pairs not yet done: their turns at the pace measured and
    a start-up for their wave."""
    from runner.measure.progress import PairWatch

    said: list[str] = []
    clock = _Clock()
    watch = PairWatch(said.append, "round-3", roles=2, turns_per_pair=4, prior_s=2.0, clock=clock)
    watch.plan(12)
    clock.now += 10  # the first wave's workers are up
    for _ in range(32):  # eight pairs' turns, 2 s each
        watch.turn_done()
        clock.now += 2
    clock.now += 6  # their finish
    for _ in range(8):
        watch.pair_done()
    burst = [getattr(e, "left_s", None) for e in said[-8:]]
    # 16 turns at (80 - 10) / 32 s, and the second wave's start-up (10 s)
    assert burst == [pytest.approx(16 * 70 / 32 + 10)] * 8, said[-8:]
    assert all("about 45 s left" in line for line in said[-8:]), said[-8:]


def test_a_step_after_the_measurement_does_not_show_its_figures() -> None:
    """The live line kept a finished measurement's pairs and "finishing" through the
    minute of the baseline's quick script that came after it."""
    from io import StringIO

    from rich.console import Console

    from runner.cli.progress_view import ProgressView
    from runner.measure.progress import PairWatch, StepStarted

    clock = _Clock()
    console = Console(file=StringIO(), force_terminal=True, width=200, color_system=None)
    with ProgressView(console=console, clock=clock) as view:
        watch = PairWatch(view, "round-1", roles=1, turns_per_pair=1, clock=clock)
        watch.plan(3)
        clock.now += 30
        for _ in range(3):
            watch.turn_done()
        for _ in range(3):
            watch.pair_done()
        view(StepStarted("round-1", name="quick-baseline"))
        clock.now += 40
        line = view.status_text()
    assert line == "round-1: quick-baseline · 1 min 10 s elapsed", line


def test_re_measurements_are_named_by_the_pairs_they_hold() -> None:
    """ "1 re-measurement(s) of 23 pair(s)" after 12 pairs: the one run held the 12."""
    from runner.judge.evidence import Evidence, estimate, noise_rule

    gains = tuple(0.0588 + (0.1 if i % 2 else -0.1) for i in range(12))
    ev = Evidence(gains, estimate(list(gains)), {"a": estimate(list(gains))})
    assert ev.remeasure_size() > ev.n
    _, figures = noise_rule(ev)
    assert figures.startswith(
        f"1 re-measurement(s) of 12 pair(s) (the noise measured asks for "
        f"{ev.remeasure_size()} a re-measurement)"
    ), figures
    tidy = Evidence(gains[:10], estimate(list(gains[:10])), {})
    assert noise_rule(tidy)[1].startswith("1 re-measurement(s) of 10 pair(s)")


# ---- one unit per metric, one "current best" -------------------------------------------
def test_one_current_best_and_one_unit_per_metric(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A round's summary called two figures of round-1's code "current best" and
    "baseline" (the incumbent measured in the round, 8.009; round-1's recorded 7.858)
    while `status` gave a third label to the second; and "Aggregate Combined Step
    TFLOPS" stood beside a figure in GFLOPS, in summary.md, optimize.md's header and
    `campaign score`.  Each figure is now named as what it is, in one unit."""
    c = Campaign.init(tmp_path / "campaigns", manifest())
    base = Score(METRIC, 0.007858, (ShapeScore("a", "PASS", 0.007858, 0.007, 0.009),), 1, 0)
    inc = Score(METRIC, 0.008009, (ShapeScore("a", "PASS", 0.008009, 0.007, 0.009),), 1, 0)
    cand = Score(METRIC, 0.009066, (ShapeScore("a", "PASS", 0.009066, 0.008, 0.010),), 1, 0)
    for n, status, score, best in (
        (1, Status.BASELINE, base, None),
        (2, Status.ROLLED_BACK, cand, inc),
    ):
        c.snapshot_dir(n).mkdir(parents=True)
        (c.snapshot_dir(n) / "kernel.py").write_text("pass\n")
        close_round(
            c,
            RoundResult(
                round=n,
                status=status,
                level="quick",
                hypothesis="h",
                change="c",
                description="d",
                started="2026-12-03 17:30",
                finished="2026-12-03 17:40",
                test_command="pytest tests -q",
                benchmark_command="python bench.py",
                score=score,
                baseline=base,
                best=best,
            ),
        )
    summary = c.summary_path(2).read_text("utf-8")
    assert "Aggregate Combined Step GFLOPS" in summary and "TFLOPS" not in summary, summary
    assert "current best:" not in summary, summary  # no second "current best" figure
    assert "vs the incumbent in this round (the current best's code" in summary, summary
    assert "8.009 -> 9.066 GFLOPS" in summary and "7.858 -> 9.066 GFLOPS" in summary
    log = c.optimize_log.read_text("utf-8")
    assert "Aggregate Combined Step GFLOPS (geomean over 1 PASS shapes): 7.858 GFLOPS" in log
    assert "vs the incumbent in this round" in log and "vs current best" not in log
    code, status = run_cli(["--campaigns-root", str(tmp_path / "campaigns"), "status"], capsys)
    best = next(line for line in status.splitlines() if line.startswith("current best:"))
    assert "7.858 GFLOPS as measured at the baseline" in best, best
    assert "8.009" not in status, status
    csv = c.rounds_dir / "round-1" / "artifacts" / "benchmark.csv"
    csv.parent.mkdir(parents=True, exist_ok=True)
    csv.write_text(
        "label,B,M,N,K,Check,Forward TFLOPS,Forward TFLOPS_stddev,Backward TFLOPS,"
        "Backward TFLOPS_stddev,Forward Time (ms),Backward Time (ms),out_snr,da_snr,db_snr\n"
        "cpu-small-16x256x1024,1,16,256,1024,PASS,0.0021,0.0002,0.0034,0.0002,3.9,4.8,"
        "28.6,28.6,29.1\n"
    )
    code, out = run_cli(["score", str(csv)], capsys)
    assert code == 0 and "aggregate (Combined Step GFLOPS, geomean): " in out, out
    assert "aggregate (Combined Step GFLOPS, geomean): 2.893 GFLOPS\n" in out, out
