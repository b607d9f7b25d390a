"""Figures people read (runner.render.figures): a unit chosen for the size of the values,
at least 3 significant digits, and a gain shown with the spread of its pairs; on the
real demo campaign (a CPU campaign: its TFLOPS are in the thousandths)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from runner.cli.validate_cmd import print_result
from runner.core.outcomes import Decision, GateResult, PairedEvidence
from runner.render.figures import fmt_gain, fmt_metric, fmt_num, scale_for
from runner.render.summary import render_summary
from runner.store.campaign import Campaign

# a figure with 3 decimals and fewer than 3 significant digits: what the CPU rounds showed
UNREADABLE = re.compile(r"(?<![\d.])0\.0\d\d(?![\d%])")
SPREAD = re.compile(r"[+-]\d+\.\d{3}% ± \d+\.\d\d% \(\d+ pairs\)")


@pytest.mark.parametrize(
    ("metric", "values", "unit"),
    [
        ("Combined Step TFLOPS", [512.3, 87.0], "TFLOPS"),
        ("Combined Step TFLOPS", [1.2], "TFLOPS"),
        ("Combined Step TFLOPS", [0.0123, 0.004], "GFLOPS"),
        ("Forward TFLOPS", [0.0000412], "MFLOPS"),
        ("Forward GB/s", [812.0], "GB/s"),
        ("Forward GB/s", [0.52], "MB/s"),
    ],
)
def test_the_unit_fits_the_size(metric: str, values: list[float], unit: str) -> None:
    assert scale_for(metric, values).unit == unit


def test_at_least_three_significant_digits() -> None:
    assert fmt_num(512.3456) == "512.346"
    assert fmt_num(0.312) == "0.312"
    assert fmt_num(0.00312) == "0.00312"
    assert fmt_num(None) == "-"
    assert fmt_metric(0.00312, "Combined Step TFLOPS") == "3.120 GFLOPS"
    assert scale_for("Forward TFLOPS", [0.003]).label("Forward TFLOPS") == "Forward GFLOPS"


def test_a_gain_carries_its_pairs() -> None:
    # the 95% interval in log space, as the gate computes it: t(1 dof) = 12.706 times
    # the standard error of ln(1.01) and ln(1.03)
    base = GateResult(Decision.ACCEPTED, "m", 1.0, 1.02, 2.0, (), (), (), 2.0)
    gate = replace(base, pair_gains_pct=(1.0, 3.0))
    assert fmt_gain(2.0, gate) == "+2.000% ± 12.46% (2 pairs)"
    assert fmt_gain(2.0, None) == "+2.000%"
    one = replace(base, pair_gains_pct=(1.0,))
    assert fmt_gain(2.0, one) == "+2.000%"  # no spread from one pair
    # the gate's own evidence, when recorded, is what is shown
    gain = {"mean_pct": 2.0, "half_width_pct": 0.5, "pairs": 9}
    judged = replace(gate, evidence=PairedEvidence.from_dict({"gain": gain}))
    assert fmt_gain(2.0, judged) == "+2.000% ± 0.50% (9 pairs)"


def test_demo_figures_read_in_gflops_with_their_pairs(
    demo_campaign: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = Campaign.load(demo_campaign)
    for n in campaign.closed_rounds():
        written = campaign.summary_path(n).read_text(encoding="utf-8")
        rendered = render_summary(campaign.load_result(n), campaign.manifest)
        for text in (written, rendered):
            assert "GFLOPS" in text, n
            assert not UNREADABLE.findall(text), (n, UNREADABLE.findall(text))
    for n in (2, 3):  # validate rounds: measured in interleaved pairs
        gate_line = next(
            line for line in campaign.summary_path(n).read_text().splitlines() if "Gate " in line
        )
        assert SPREAD.search(gate_line), gate_line
        print_result(campaign.load_result(n), campaign)
        terminal = capsys.readouterr().out
        assert SPREAD.search(terminal), terminal
        assert "GFLOPS" in terminal and not UNREADABLE.findall(terminal), terminal
    trend = campaign.trend_log.read_text(encoding="utf-8")
    assert not UNREADABLE.findall(trend.split("| round-1 |", 1)[1])
