"""``campaign report``: the S/W/R split, directions, next steps, the Termination Check and
the Final Report on synthetic rounds (unit); twice on the real demo campaign: the log
grows and the first report's bytes stay intact (integration)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import manifest
from click.testing import CliRunner

from runner.cli import cli
from runner.core.outcomes import (
    Decision,
    GateResult,
    PairedEvidence,
    RollbackAnalysis,
    RoundResult,
    Score,
    ShapeScore,
    Status,
    TransferCheck,
)
from runner.core.stats import geomean
from runner.flow.report import write_report
from runner.render.final_report import (
    brief,
    effective_directions,
    ineffective_directions,
    next_steps,
    render_report,
    transfer_split,
)
from runner.render.plots import round_points, shape_trend
from runner.store.appendlog import verify
from runner.store.campaign import Campaign

METRIC = "Combined Step TFLOPS"


def score(**values: float) -> Score:
    shapes = tuple(ShapeScore(k, "PASS", v, v, v) for k, v in values.items())
    return Score(METRIC, geomean(values.values()), shapes, len(shapes), 0)


BASE = score(a=100.0, b=200.0)


def rnd(
    n: int, status: Status, delta: float = 0.0, transfer: TransferCheck | None = None
) -> RoundResult:
    factor = 1 + delta / 100
    gate = None
    if n > 1:
        decision = Decision.ACCEPTED if status is Status.ACCEPTED else Decision.ROLLED_BACK
        gate = GateResult(decision, METRIC, 1.0, factor, delta, (), (), ())
    rollback = None
    if status is Status.ROLLED_BACK:
        rollback = RollbackAnalysis("c", "e", "a", "r", f"lesson {n}")
    return RoundResult(
        round=n,
        status=status,
        level="full" if n == 1 else "quick",
        hypothesis=f"h{n}",
        change="k.py",
        description=f"idea {n}",
        started="2026-11-29 10:00",
        finished="2026-11-29 10:05",
        test_command="t",
        benchmark_command="b",
        score=score(a=100.0 * factor, b=200.0 * factor) if status is Status.ACCEPTED else BASE,
        baseline=BASE,
        best=None if n == 1 else BASE,
        gate=gate,
        rollback=rollback,
        next_direction=f"next after {n}",
        transfer=transfer or TransferCheck(),
    )


def w1(estimate: float | None) -> TransferCheck:
    return TransferCheck(bucket="W1", estimated_real_gain_pct=estimate)


def test_split_all_kernel_internal_has_no_gap() -> None:
    split = transfer_split([rnd(1, Status.BASELINE), rnd(2, Status.ACCEPTED, 10.0)])
    assert split.s_real_pct == pytest.approx(10.0)
    assert split.w_real_pct == 0 and split.r_real_pct == 0
    assert split.gap_pct == pytest.approx(0.0)
    assert not split.inflated


def test_split_weight_cache_capped_and_overfit_counted_as_r() -> None:
    results = [
        rnd(1, Status.BASELINE),
        rnd(2, Status.ACCEPTED, 10.0),
        rnd(3, Status.ROLLED_BACK, -3.0),
        rnd(4, Status.ACCEPTED, 5.0, w1(2.0)),
        rnd(5, Status.ACCEPTED, 4.0, TransferCheck(bucket="W2")),
    ]
    split = transfer_split(results)
    assert [x.share for x in split.rows] == ["S", "W", "R"]
    assert split.s_real_pct == pytest.approx(10.0)
    assert split.w_real_pct == pytest.approx(2.0)
    assert split.r_real_pct == pytest.approx(4.0)
    assert split.headline_pct == pytest.approx((1.1 * 1.05 * 1.04 - 1) * 100)
    assert split.real_pct == pytest.approx((1.1 * 1.02 - 1) * 100)
    assert split.inflated  # 20.1% headline vs 12.2% real


def test_split_small_gap_is_not_called_out() -> None:
    results = [rnd(1, Status.BASELINE), rnd(2, Status.ACCEPTED, 5.0, w1(4.5))]
    split = transfer_split(results)
    assert split.gap_pct == pytest.approx(0.5)
    assert not split.inflated


def test_directions_and_next_steps() -> None:
    results = [rnd(1, Status.BASELINE), rnd(2, Status.ACCEPTED, 4.0), rnd(3, Status.ROLLED_BACK)]
    assert effective_directions(results) == ["round-2: idea 2 (+4.000% vs incumbent)"]
    assert ineffective_directions(results) == [
        "round-3: idea 3 (+0.000% vs incumbent); lesson: lesson 3"
    ]
    steps = next_steps(results, None, (BASE, results[1].score))
    assert len(steps) == 3
    assert "campaign accept" in steps[0]
    assert steps[1].startswith("Escalation step 1")


def test_a_description_cut_mid_word_is_cut_at_a_word_instead() -> None:
    long = "Keep the dequantised operands of the backward GEMM in registers across 128x128 blocks"
    r = replace(rnd(2, Status.ROLLED_BACK), hypothesis=long, description=long[:80])
    assert long[:80].endswith("128x128 b")  # what the record holds
    (line,) = ineffective_directions([rnd(1, Status.BASELINE), r])
    assert line.startswith(f"round-2: {long[:78]}… (")  # "...across 128x128…"
    assert brief(rnd(3, Status.ACCEPTED)) == "idea 3"  # a whole description is kept


def test_shape_trend_chains_paired_changes_with_their_intervals() -> None:
    """The per-shape trend: accepted rounds move a shape's level, a rolled-back one is
    drawn where it landed without moving it; the error bar is the paired interval."""
    evidence = {
        "gain": {"mean_pct": 4.0, "half_width_pct": 1.0, "pairs": 3},
        "shapes": {"a": {"mean_pct": 10.0, "half_width_pct": 2.0, "pairs": 3}},
    }
    accepted = rnd(2, Status.ACCEPTED, 4.0)
    assert accepted.gate is not None
    typed = PairedEvidence.from_dict(evidence)
    accepted = replace(accepted, gate=replace(accepted.gate, evidence=typed, threshold_pct=2.0))
    gone = rnd(3, Status.ROLLED_BACK, -50.0)
    assert gone.gate is not None
    fell = {"a": {"mean_pct": -50.0, "half_width_pct": 5.0, "pairs": 3}}
    gone = replace(
        gone,
        gate=replace(gone.gate, evidence=PairedEvidence.from_dict({**evidence, "shapes": fell})),
    )
    results = [rnd(1, Status.BASELINE), accepted, gone]
    a = shape_trend(results)["a"]
    assert [(x[0], x[3]) for x in a] == [
        (1, Status.BASELINE),
        (2, Status.ACCEPTED),
        (3, Status.ROLLED_BACK),
    ]
    assert a[1][1] == pytest.approx(110.0) and a[1][2] == pytest.approx(2.0)
    assert a[2][1] == pytest.approx(55.0) and a[2][2] == pytest.approx(5.5)  # of 110
    points = round_points(results, ["a", "b"])
    assert points[1].error == pytest.approx(points[0].value * 0.01)  # ± 1% of the incumbent
    assert points[1].bar == pytest.approx(points[0].value * 1.02)  # what it had to clear


def manifest_campaign(tmp_path: Path, **over: Any) -> Campaign:
    """A campaign folder of the helpers' manifest on gfx942, with a recorded sigma_g."""
    fields = {
        "campaign_name": "gemm_triton_gfx942_20261129",
        "target_gpu": "gfx942",
        "sigma_g": 0.004,
        "representative_shapes": [],
    }
    return Campaign.init(tmp_path / "campaigns", manifest(**(fields | over)))


def termination_lines(text: str) -> list[str]:
    block = text.split("## Termination Check\n\n", 1)[1].split("\n\n", 1)[0]
    return block.splitlines()


def test_termination_check_t1_to_t4(tmp_path: Path) -> None:
    c = manifest_campaign(tmp_path, performance_target=">200 TFLOPS", max_iterations=2)
    results = [rnd(1, Status.BASELINE), rnd(2, Status.ACCEPTED, 10.0), rnd(3, Status.ROLLED_BACK)]
    text = render_report(c, results, None, when="2026-11-29 18:00", user_stop=True)
    lines = termination_lines(text)
    assert [ln[:4] for ln in lines] == ["- T1", "- T2", "- T3", "- T4", "- Ve"]
    assert "T1 performance target (>200 TFLOPS): NOT MET" in lines[0]
    assert "T2 fraction of hardware peak: NOT MET" in lines[1]  # 155.6 of 1307.4 bf16
    assert "T3 max_iterations: MET — 2 of 2" in lines[2]
    assert lines[3] == "- T4 user asked to stop: YES"
    assert "may end (T3, T4 holds)" in lines[4]


def test_final_report_sections_without_acceptance(tmp_path: Path) -> None:
    c = manifest_campaign(tmp_path)
    results = [rnd(1, Status.BASELINE), rnd(2, Status.ACCEPTED, 10.0)]
    text = render_report(c, results, None, when="2026-11-29 18:00")
    assert text.index("## Termination Check") < text.index("## Final Report (2026-11-29 18:00)")
    for heading in (
        "Baseline vs final best",
        "Cumulative gain",
        "Effective directions",
        "Ineffective directions",
        "Top three next steps",
        "Round summaries",
        "Real-training audit",
    ):
        assert f"### {heading}" in text
    assert "full validation has not been run" in text
    assert "[rounds/round-2/summary.md](../rounds/round-2/summary.md)" in text
    assert "S_real (K1-K4, counted 1:1): +10.000%" in text
    assert not re.search(r"^### round-", text, flags=re.M)  # never a history marker
    # its gate was judged on no pairs: nothing spent of the false-accept budget
    assert "false-accept budget: nothing spent" in text


# ---- integration ---------------------------------------------------------------------------
def _record_bytes(campaign: Path) -> dict[str, bytes]:
    """Every file of the campaign's permanent records (logs/, rounds/, the manifest)."""
    files = [
        campaign / "manifest.yaml",
        *(campaign / "logs").rglob("*"),
        *(campaign / "rounds").rglob("*"),
    ]
    return {str(p.relative_to(campaign)): p.read_bytes() for p in files if p.is_file()}


@pytest.mark.integration
def test_report_twice_leaves_every_record_byte_identical(demo_copy: Path) -> None:
    """docs/reliability.md §7 row 12: reading is not writing.  `campaign report` (and `status`) run
    any number of times leave optimize.md and every other record byte-identical; the
    report is regenerated in report/."""
    campaign = Campaign.load(demo_copy)
    before = _record_bytes(demo_copy)
    write_report(campaign, when="2026-11-29 18:00")
    markdown = demo_copy / "report" / "final_report.md"
    first = markdown.read_bytes()
    root = ["--campaigns-root", str(demo_copy.parent)]
    res = CliRunner().invoke(cli, [*root, "report"])
    assert res.exit_code == 0, res.output
    assert CliRunner().invoke(cli, [*root, "status"]).exit_code == 0
    assert _record_bytes(demo_copy) == before
    verify(campaign.optimize_log)
    text = markdown.read_text("utf-8")
    assert text.count("## Final Report (") == 1 and text.count("## Termination Check") == 1
    assert "full validation has not been run" in text
    assert first.count(b"## Final Report (2026-11-29 18:00)") == 1
    html = demo_copy / "report" / "index.html"
    assert html.is_file() and "data:image/png;base64," in html.read_text("utf-8")
    for name in ("rounds.png", "shape_trend.png", "noise.png", "shapes.png"):
        assert (demo_copy / "report" / name).stat().st_size > 5000
    # no peak is known for a CPU: no "fraction of peak" chart repeating the figures
    assert not (demo_copy / "report" / "roofline.png").exists()
    assert "html: " in res.output and f"report: {markdown}" in res.output
