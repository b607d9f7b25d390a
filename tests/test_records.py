"""Records: exact trend formats, summary sections, optimize.md, close_round, chain."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import manifest

from runner.core.errors import ConfigError, RoundOutOfOrder
from runner.core.outcomes import (
    Decision,
    GateResult,
    RollbackAnalysis,
    RoundResult,
    Score,
    ShapeDelta,
    ShapeScore,
    Status,
)
from runner.core.stats import geomean
from runner.render.chain import check_chain
from runner.render.markdown import (
    Ineffective,
    render_current_best,
    render_directions,
    render_final_sections,
    render_history_entry,
    render_optimize_header,
    render_termination_check,
    render_trend_row,
)
from runner.render.summary import SECTIONS, render_summary
from runner.round.logs import close_round, correct_logs
from runner.store.appendlog import verify
from runner.store.campaign import Campaign
from runner.store.log_format import TREND_HEADER, TREND_SEPARATOR

COMBINED = "Combined Step TFLOPS"


def shape(
    label: str, fwd: float | None, bwd: float | None = None, check: str = "PASS"
) -> ShapeScore:
    if check != "PASS" or fwd is None:
        return ShapeScore(label, check, None)
    value = 6 / (2 / fwd + 4 / bwd) if bwd else fwd
    return ShapeScore(label, check, value, fwd, bwd)


def score(*shapes: ShapeScore, metric: str = COMBINED) -> Score:
    ok = [s.value for s in shapes if s.check == "PASS" and s.value is not None]
    fail = len(shapes) - len(ok)
    return Score(metric, 0.0 if fail else geomean(ok), tuple(shapes), len(ok), fail)


BASE = score(shape("a", 400, 200), shape("b", 300, 150))


def rr(n: int, status: Status, sc: Score, **over: Any) -> RoundResult:
    fields: dict[str, Any] = {
        "round": n,
        "status": status,
        "level": "full" if n == 1 else "quick",
        "hypothesis": "num_stages 2->3 hides global-load latency",
        "change": "num_stages=3 in the autotune config",
        "description": "baseline" if n == 1 else f"attempt {n}",
        "started": "2026-11-29 14:05",
        "finished": "2026-11-29 14:35",
        "test_command": "pytest tests -q",
        "benchmark_command": "python bench.py",
        "score": sc,
        "baseline": over.pop("baseline", BASE),
        "best": None if n == 1 else BASE,
        "artifacts": ["artifacts/benchmark.csv"],
    }
    fields.update(over)
    return RoundResult(**fields)


def gate(decision: Decision, regressed: tuple[str, ...] = (), delta: float = 4.805) -> GateResult:
    return GateResult(
        decision=decision,
        metric=COMBINED,
        best_aggregate=207.846,
        candidate_aggregate=217.832,
        delta_pct=delta,
        shapes=(
            ShapeDelta("a", 240.0, 244.4, 1.852, "PASS"),
            ShapeDelta("b", 180.0, 177.0, -1.667, "PASS"),
        ),
        regressed=regressed,
        reasons=(f"geomean {delta:+.3f}% >= threshold 2.000%",),
        threshold_pct=2.0,
        pairs_used=1,
    )


# -- performance_trend.md ------------------------------------------------------------
def test_trend_header_is_exact() -> None:
    assert TREND_HEADER == (
        "| Round | Status | Description | Fwd Avg TFLOPS | Fwd Peak TFLOPS | Bwd Avg TFLOPS "
        "| Bwd Peak TFLOPS | Combined Step TFLOPS | vs Baseline | Key Finding |"
    )
    assert TREND_SEPARATOR == "|---|---|---|---|---|---|---|---|---|---|"


def test_trend_baseline_row() -> None:
    row = render_trend_row(rr(1, Status.BASELINE, BASE, key_finding="first measurement"))
    assert row == (
        "| round-1 | BASELINE | baseline | 346.410 | 400.000 | 173.205 | 200.000 | 207.846 "
        "| — | first measurement |\n"
    )


def test_trend_accepted_row() -> None:
    sc = score(shape("a", 440, 200), shape("b", 300, 165))
    r = rr(2, Status.ACCEPTED, sc, description="num_stages 2->3", key_finding="hides latency")
    assert render_trend_row(r) == (
        "| round-2 | ACCEPTED | num_stages 2->3 | 363.318 | 440.000 | 181.659 | 200.000 "
        "| 217.832 | step +4.805%, fwd +4.881%, bwd +4.881% | hides latency |\n"
    )


def test_trend_rolled_back_row_has_negative_signs() -> None:
    sc = score(shape("a", 390, 190), shape("b", 290, 150))
    r = rr(3, Status.ROLLED_BACK, sc, description="BLOCK_K 64", key_finding="spills")
    assert render_trend_row(r) == (
        "| round-3 | ROLLED BACK | BLOCK_K 64 | 336.303 | 390.000 | 168.819 | 190.000 "
        "| 202.408 | step -2.616%, fwd -2.918%, bwd -2.532% | spills |\n"
    )


def test_trend_row_without_backward_path() -> None:
    base = score(shape("a", 100), shape("b", 400), metric="Forward TFLOPS")
    sc = score(shape("a", 110), shape("b", 400), metric="Forward TFLOPS")
    r = rr(2, Status.ACCEPTED, sc, baseline=base, description="tile 128", key_finding="k")
    assert render_trend_row(r) == (
        "| round-2 | ACCEPTED | tile 128 | 209.762 | 400.000 | - | - | 209.762 "
        "| step +4.881%, fwd +4.881%, bwd — | k |\n"
    )


def test_trend_row_escapes_pipes_and_newlines() -> None:
    r = rr(1, Status.BASELINE, BASE, description="a|b\nc", key_finding="x | y")
    assert "| a\\|b c |" in render_trend_row(r)
    assert "| x \\| y |" in render_trend_row(r)


def test_trend_row_memory_bound_marks_the_unit() -> None:
    m = "Forward GB/s"
    base = score(shape("a", 1000), shape("b", 2000), shape("c", 4000), metric=m)
    row = render_trend_row(rr(1, Status.BASELINE, base, baseline=base, key_finding="copy"))
    assert row == (
        "| round-1 | BASELINE | baseline | 2000.000 | 4000.000 | - | - | 2000.000 | — "
        "| (GB/s) copy |\n"
    )


def test_trend_row_failed_round() -> None:
    sc = score(shape("a", 440, 200), shape("b", None, check="FAIL"))
    row = render_trend_row(rr(2, Status.FAILED, sc, description="broken"))
    assert row.startswith("| round-2 | FAILED | broken | 440.000 | 440.000 | 200.000 | 200.000 ")
    assert "| 0.000 | step -100.000%, fwd +10.000%, bwd +0.000% |" in row


def test_quick_round_is_compared_on_its_own_shapes() -> None:
    base = score(shape("a", 400, 200), shape("b", 300, 150), shape("c", 100, 50))
    sc = score(shape("a", 400, 200), shape("b", 300, 150))
    row = render_trend_row(rr(2, Status.ACCEPTED, sc, baseline=base))
    assert "step +0.000%, fwd +0.000%, bwd +0.000%" in row


# -- summary.md -----------------------------------------------------------------------
def headings(text: str) -> list[str]:
    return re.findall(r"^## (.+)$", text, flags=re.M)


def test_baseline_summary() -> None:
    text = render_summary(rr(1, Status.BASELINE, BASE), manifest())
    assert text.startswith("# Round 1 — BASELINE\n")
    assert headings(text) == [s for s in SECTIONS if s != "Rollback Analysis"]
    assert "No code changed" in text.split("## Single change")[1].split("## Results")[0]
    decision = text.split("## Decision")[1].split("## Attribution")[0]
    assert "**BASELINE**" in decision
    assert "No code changed" in decision
    assert "| a " in text
    assert "207.846" in text


def test_accepted_summary_with_tradeoff() -> None:
    sc = score(shape("a", 440, 200), shape("b", 300, 165))
    r = rr(2, Status.ACCEPTED, sc, gate=gate(Decision.ACCEPTED_TRADEOFF, ("b",)))
    text = render_summary(r, manifest())
    assert text.startswith("# Round 2 — ACCEPTED\n")
    assert headings(text) == [s for s in SECTIONS if s != "Rollback Analysis"]
    results = text.split("## Results")[1].split("## Decision")[0]
    for needle in (
        "Validation time: 2026-11-29 14:05 → 2026-11-29 14:35",
        "Level: quick",
        "`pytest tests -q`",
        "`python bench.py`",
        "`artifacts/benchmark.csv`",
        "Δ vs the incumbent in this round",
        "+1.852%",  # a: 244.444 vs 240
        "vs the recorded baseline (round-1's aggregate, measured at the baseline): "
        "207.846 -> 217.832 TFLOPS (+4.805%)",
        "in this round's pairs; what the gate judged): 207.846 -> 217.832 TFLOPS (+4.805%)",
    ):
        assert needle in results, needle
    decision = text.split("## Decision")[1].split("## Attribution")[0]
    assert "**ACCEPTED**" in decision
    assert "geomean +4.805% >= threshold 2.000%" in decision
    assert "trade-off: accepted although these shapes regressed" in decision
    assert "b (-1.667%)" in decision
    transfer = text.split("## Real-training transfer check")[1]
    assert "- Bucket: K1" in transfer
    assert "- Benchmark gain: +4.805%" in transfer
    assert "- Decision: ACCEPT-as-real" in transfer


def test_rolled_back_summary_has_rollback_analysis_in_order() -> None:
    rb = RollbackAnalysis("BLOCK_K 64", "+3%", "-2.6%", "register spills", "keep BLOCK_K 32")
    sc = score(shape("a", 390, 190), shape("b", 290, 150))
    r = rr(3, Status.ROLLED_BACK, sc, rollback=rb, gate=gate(Decision.ROLLED_BACK, delta=-2.6))
    text = render_summary(r, manifest())
    assert text.startswith("# Round 3 — ROLLED BACK\n")
    assert headings(text) == list(SECTIONS)
    assert "- Root cause: register spills" in text
    assert "**ROLLED BACK**" in text


def test_rollback_without_analysis_says_it_is_missing() -> None:
    sc = score(shape("a", 390, 190), shape("b", 290, 150))
    text = render_summary(rr(3, Status.ROLLED_BACK, sc), manifest())
    assert "Rollback Analysis" in headings(text)
    assert "not recorded" in text


def test_numbers_have_three_decimals() -> None:
    text = render_summary(rr(1, Status.BASELINE, BASE), manifest())
    assert "240.000" in text
    assert "173.205" not in text  # Avg is a trend figure, not a per-shape one
    assert re.search(r"\b240\.0{4}", text) is None


# -- optimize.md ----------------------------------------------------------------------
def test_history_entry() -> None:
    sc = score(shape("a", 440, 200), shape("b", 300, 165))
    r = rr(2, Status.ACCEPTED, sc, gate=gate(Decision.ACCEPTED), key_finding="k", commit="abc123")
    entry = render_history_entry(r)
    assert entry.startswith(
        "\n### round-2 — ACCEPTED\n\n- Time: 2026-11-29 14:05 → 2026-11-29 14:35\n"
    )
    labels = [line.split(":")[0] for line in entry.strip().splitlines()[2:]]
    assert labels == [
        "- Time",
        "- Level",
        "- Hypothesis",
        "- Changes",
        "- Result",
        "- Test",
        "- Decision",
        "- Details",
        "- Notes",
    ]
    assert (
        "- Result: Combined Step TFLOPS geomean 207.846 -> 217.832 TFLOPS (+4.805% vs the "
        "incumbent in this round" in entry
    )
    assert "- Details: [rounds/round-2/summary.md](../rounds/round-2/summary.md)" in entry
    assert "- Notes: k; commit abc123" in entry


def test_optimize_header_has_information_and_baseline_table() -> None:
    text = render_optimize_header(manifest(), rr(1, Status.BASELINE, BASE))
    assert "## Basic information" in text
    assert "| Primary metric" in text
    assert "optimize/gemm_triton_cpu_20261129" in text
    assert "## Baseline (round-1, full validation, 2026-11-29 14:35)" in text
    assert text.rstrip().endswith("## History")


def test_current_best_and_directions() -> None:
    best = score(shape("a", 440, 200), shape("b", 300, 165))
    text = render_current_best(BASE, best, 2)
    assert "| Shape (MxNxK) " in text
    assert "- Aggregate score: baseline " in text and "(+4.805%)" in text
    assert "- Current best: round-2;" in text
    d = render_directions(["split-K for small M"], [Ineffective("BLOCK_K 256", 3, "spills")])
    assert "## Directions to Try\n- [ ] split-K for small M\n" in d
    assert "- [x] ~~BLOCK_K 256~~ (verified in round-3)\n" in d
    assert "## Verified Ineffective Directions\n| Direction " in d
    assert "## Verified Ineffective Directions\n- none yet\n" in render_directions([], [])


def test_termination_check() -> None:
    results = [rr(1, Status.BASELINE, BASE), rr(2, Status.ROLLED_BACK, BASE)]
    m = manifest(performance_target=">200 TFLOPS", max_iterations=5)
    text = render_termination_check(m, results)
    assert text.startswith("\n## Termination Check\n")
    assert "- T1 performance target (>200 TFLOPS): MET — best 207.846 TFLOPS (round-1)" in text
    assert "- T2 fraction of hardware peak: unknown" in text
    assert "- T3 max_iterations: NOT MET — 1 of 5 attempt rounds used" in text
    assert "- T4 user asked to stop: no" in text
    assert "- Verdict: the campaign may end (T1 holds)" in text
    none = render_termination_check(manifest(), results)
    assert "may NOT end yet" in none


# -- close_round ----------------------------------------------------------------------
@pytest.fixture
def camp(tmp_path: Path) -> Campaign:
    return Campaign.init(tmp_path / "campaigns", manifest())


def snap(c: Campaign, n: int) -> None:
    c.snapshot_dir(n).mkdir(parents=True)
    (c.snapshot_dir(n) / "kernel.py").write_text("pass\n")


def count(path: Path, prefix: str) -> int:
    return sum(1 for line in path.read_text().splitlines() if line.startswith(prefix))


def test_close_two_rounds(camp: Campaign) -> None:
    snap(camp, 1)
    close_round(camp, rr(1, Status.BASELINE, BASE))
    snap(camp, 2)
    sc = score(shape("a", 440, 200), shape("b", 300, 165))
    close_round(camp, rr(2, Status.ACCEPTED, sc, gate=gate(Decision.ACCEPTED)))
    assert camp.closed_rounds() == [1, 2]
    assert camp.summary_path(2).read_text().startswith("# Round 2 — ACCEPTED")
    assert count(camp.optimize_log, "## Basic information") == 1
    assert count(camp.optimize_log, "### round-") == 2
    trend = camp.trend_log.read_text()
    assert trend.endswith(
        f"{TREND_HEADER}\n{TREND_SEPARATOR}\n| round-1 | BASELINE |"
        + trend.split("| round-1 | BASELINE |")[1]
    )
    assert count(camp.trend_log, "| round-") == 2
    verify(camp.optimize_log)
    verify(camp.trend_log)
    assert camp.load_result(2).status == Status.ACCEPTED


def test_close_refuses_closed_out_of_order_and_wrong_status(camp: Campaign) -> None:
    snap(camp, 1)
    with pytest.raises(ConfigError, match="only round-1 is the BASELINE"):
        close_round(camp, rr(1, Status.ACCEPTED, BASE))
    close_round(camp, rr(1, Status.BASELINE, BASE))
    with pytest.raises(RoundOutOfOrder, match="already closed"):
        close_round(camp, rr(1, Status.BASELINE, BASE))
    with pytest.raises(RoundOutOfOrder, match=r"the next round .* is round 2"):
        close_round(camp, rr(3, Status.ACCEPTED, BASE))
    with pytest.raises(ConfigError, match="kernel_snapshot is missing"):
        close_round(camp, rr(2, Status.ACCEPTED, BASE))
    assert not camp.summary_path(2).exists()


@pytest.mark.parametrize("logs_written", [False, True])
def test_interrupted_close_can_be_rerun(camp: Campaign, logs_written: bool) -> None:
    snap(camp, 1)
    close_round(camp, rr(1, Status.BASELINE, BASE))
    snap(camp, 2)
    r = rr(2, Status.ROLLED_BACK, BASE, gate=gate(Decision.ROLLED_BACK, delta=0.0))
    camp.summary_path(2).write_text("# Round 2 — half written")
    if logs_written:  # crashed after the appends, before result.json
        close_round(camp, r)
        camp.result_path(2).unlink()
    assert camp.closed_rounds() == [1]
    close_round(camp, r)
    assert camp.closed_rounds() == [1, 2]
    assert count(camp.optimize_log, "### round-2 — ") == 1
    assert count(camp.trend_log, "| round-2 |") == 1
    assert count(camp.optimize_log, "## Basic information") == 1
    assert camp.summary_path(2).read_text().startswith("# Round 2 — ROLLED BACK")
    verify(camp.trend_log)


def test_close_detects_an_edited_log(camp: Campaign) -> None:
    snap(camp, 1)
    close_round(camp, rr(1, Status.BASELINE, BASE))
    camp.trend_log.write_text(camp.trend_log.read_text().replace("BASELINE", "ACCEPTED"))
    snap(camp, 2)
    from runner.core.errors import AppendOnlyViolation

    with pytest.raises(AppendOnlyViolation):
        close_round(camp, rr(2, Status.ROLLED_BACK, BASE))
    assert camp.closed_rounds() == [1]


# -- chain integrity ------------------------------------------------------------------
def test_chain_intact() -> None:
    up = score(shape("a", 440, 200), shape("b", 300, 165))
    slightly_down = score(shape("a", 438, 199), shape("b", 299, 164))
    results = [
        rr(1, Status.BASELINE, BASE),
        rr(2, Status.ACCEPTED, up),
        rr(3, Status.ROLLED_BACK, score(shape("a", 100, 50), shape("b", 100, 50))),
        rr(4, Status.ACCEPTED, slightly_down),
    ]
    assert check_chain(results) == []


def test_chain_violation_is_reported() -> None:
    down = score(shape("a", 390, 190), shape("b", 290, 150))
    problems = check_chain([rr(2, Status.ACCEPTED, down), rr(1, Status.BASELINE, BASE)])
    assert len(problems) == 1
    assert problems[0].startswith(
        "round-2 (ACCEPTED) Combined Step TFLOPS geomean 202.408 is 2.616% below its "
        "incumbent (207.846) measured beside it"
    )
    # a round that recorded no incumbent is held against the round before it
    alone = check_chain([rr(2, Status.ACCEPTED, down, best=None), rr(1, Status.BASELINE, BASE)])
    assert alone[0].startswith(
        "round-2 (ACCEPTED) Combined Step TFLOPS geomean 202.408 is 2.616% below round-1 (207.846)"
    )


def test_a_loaded_machine_moving_figures_between_rounds_is_no_broken_chain() -> None:
    """The demo on a loaded CI machine: its accepted round read 5% below the baseline's
    figures measured earlier, and +6.5% against the incumbent measured beside it."""
    inc_now = score(shape("a", 380, 190), shape("b", 285, 142))  # the load: all 5% slower
    cand = score(shape("a", 392, 196), shape("b", 294, 147))  # +3% on it, 2% under BASE
    result = rr(2, Status.ACCEPTED, cand, best=inc_now)
    assert check_chain([rr(1, Status.BASELINE, BASE), result]) == []
    assert len(check_chain([rr(1, Status.BASELINE, BASE), rr(2, Status.ACCEPTED, cand)])) == 1


def test_chain_compares_shared_shapes_only() -> None:
    base = score(shape("a", 400, 200), shape("b", 300, 150), shape("c", 10, 5))
    quick = score(shape("a", 400, 200), shape("b", 300, 150))
    assert check_chain([rr(1, Status.BASELINE, base), rr(2, Status.ACCEPTED, quick)]) == []


def test_chain_flags_an_accepted_round_with_a_fail() -> None:
    bad = score(shape("a", 440, 200), shape("b", None, check="FAIL"))
    problems = check_chain([rr(1, Status.BASELINE, BASE), rr(2, Status.ACCEPTED, bad)])
    assert problems == ["round-2 is ACCEPTED but 1 shape(s) FAILed"]


def test_final_sections_and_trend_correction(camp: Campaign) -> None:
    snap(camp, 1)
    close_round(camp, rr(1, Status.BASELINE, BASE))
    text = render_final_sections(camp.manifest, camp.results(), to_try=["split-K"])
    assert [h for h in headings(text)] == [
        "Current Best",
        "Directions to Try",
        "Verified Ineffective Directions",
        "Termination Check",
    ]
    with pytest.raises(RoundOutOfOrder):
        correct_logs(camp, "x", round_n=2, trend=True)
    assert correct_logs(camp, "level was full | not quick", round_n=1, trend=True) == camp.trend_log
    last = camp.trend_log.read_text().splitlines()[-1]
    assert re.fullmatch(
        r"\| round-1 \(correction\) \| CORRECTION \| \d{4}-\d\d-\d\d \d\d:\d\d: level was full "
        r"\\\| not quick \| - \| - \| - \| - \| - \| - \| - \|",
        last,
    )
    assert count(camp.trend_log, "| round-1 |") == 1
    verify(camp.trend_log)
