"""``campaign status``: counts, escalation steps, gain, unclosed rounds, JSON (unit), and
the command on the real demo campaign (integration)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import git, run_cli
from click.testing import CliRunner

from runner.cli import cli
from runner.cli.mcp_models import campaign_status_of
from runner.core.outcomes import (
    Decision,
    GateResult,
    RoundResult,
    Score,
    ShapeScore,
    Status,
)
from runner.core.stats import geomean
from runner.core.step_times import StepTime, StepTimes
from runner.flow.acceptance_record import Acceptance, Check, write_acceptance
from runner.render.figures import fmt_gain, fmt_pct
from runner.render.final_report import render_final_report, render_transfer, transfer_split
from runner.render.headline import headline_gain
from runner.render.status import (
    ESCALATION,
    collect_status,
    consecutive_rollbacks,
    escalation_step,
    render_status,
    summarise,
)
from runner.store.acceptance import acceptance_dir
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage

METRIC = "Combined Step TFLOPS"


def score(**values: float) -> Score:
    shapes = tuple(ShapeScore(k, "PASS", v, v, v) for k, v in values.items())
    return Score(METRIC, geomean(values.values()), shapes, len(shapes), 0)


BASE = score(a=100.0, b=200.0)


def result(n: int, status: Status, sc: Score | None = None) -> RoundResult:
    sc = sc or BASE
    gate = None
    if status is not Status.BASELINE:
        gate = GateResult(Decision.ACCEPTED, METRIC, 1.0, 1.0, 0.0, (), (), ())
    return RoundResult(
        round=n,
        status=status,
        level="full" if n == 1 else "quick",
        hypothesis=f"h{n}",
        change="x",
        description=f"round {n}",
        started="2026-11-29 10:00",
        finished="2026-11-29 10:05",
        test_command="t",
        benchmark_command="b",
        score=sc,
        baseline=BASE,
        best=None if n == 1 else BASE,
        gate=gate,
    )


def chain(*statuses: Status) -> list[RoundResult]:
    return [result(1, Status.BASELINE)] + [result(i, s) for i, s in enumerate(statuses, 2)]


R, A, F = Status.ROLLED_BACK, Status.ACCEPTED, Status.FAILED


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [((), 0), ((A,), 0), ((R,), 1), ((R, R), 2), ((A, R, R, R), 3), ((R, F), 2), ((R, A), 0)],
)
def test_consecutive_rollbacks(statuses: tuple[Status, ...], expected: int) -> None:
    assert consecutive_rollbacks(chain(*statuses)) == expected


def test_escalation_steps_follow_protocol_section_7() -> None:
    assert escalation_step(0) is None
    assert escalation_step(1) == (1, ESCALATION[1])
    assert "another approach" in ESCALATION[1]
    assert "rocprofv3" in ESCALATION[2] and "rocprof-compute" in ESCALATION[2]
    assert "ISA" in ESCALATION[3]
    assert "state-of-the-art" in ESCALATION[4]
    assert escalation_step(7) == (4, ESCALATION[4])


def test_summarise_counts_best_and_next() -> None:
    better = score(a=110.0, b=220.0)
    results = [*chain(R, A, F, R)]
    results[2] = paired(result(3, A, better), 10.0)
    s = summarise("c", "/c", results, unclosed=[7])
    assert (s.accepted, s.rolled_back, s.failed) == (1, 2, 1)
    assert s.best_round == 3
    assert s.gain_pct == pytest.approx(10.0)
    assert s.consecutive_rollbacks == 2
    assert s.escalation is not None and s.escalation[0] == 2
    assert s.next_round == 6
    assert s.unclosed == [7]
    assert s.chain_problems == []
    text = render_status(s)
    assert "rounds: 1 accepted, 2 rolled back, 1 failed" in text
    assert "escalation: step 2: profile: stagnation review" in text  # upstream's step name
    assert "round-7 is unclosed" in text
    assert "chain integrity: OK" in text


def paired(r: RoundResult, gain_pct: float) -> RoundResult:
    """``r`` with the gain its gate judged it on (paired, in its own round)."""
    assert r.gate is not None
    return dataclasses.replace(r, gate=dataclasses.replace(r.gate, delta_pct=gain_pct))


def test_one_headline_gain_the_accepted_rounds_paired_gains_compounded() -> None:
    """Round-2's own numbers are 10% above the baseline's (the machine drifted between
    the rounds); its paired gate said +4%.  Status and the report say the same."""
    results = chain(A, R, A)
    results[1] = paired(result(2, A, score(a=110.0, b=220.0)), 4.0)
    results[2] = paired(result(3, R, score(a=120.0, b=240.0)), 30.0)
    results[3] = paired(result(4, A, score(a=120.0, b=240.0)), 5.0)
    s = summarise("c", "/c", results)
    headline = (1.04 * 1.05 - 1) * 100
    assert s.gain_pct == pytest.approx(headline)
    assert s.to_dict()["headline_rounds"] == [2, 4]
    line = (
        "headline gain: +9.200% over the baseline (the paired gate gains of round-2, "
        "round-4 compounded; docs/protocol.md §7.4)"
    )
    assert line in render_status(s)
    assert transfer_split(results).headline_pct == pytest.approx(headline)
    assert "Headline gain (docs/protocol.md §7.4): +9.200%" in render_transfer(
        transfer_split(results)
    )
    assert summarise("c", "/c", chain(R)).gain_pct is None


def test_the_table_of_rounds_shows_decision_gain_and_hypothesis() -> None:
    long = "Retile the backward GEMM so that each wave keeps the dequantised operands in registers"
    rolled = dataclasses.replace(result(2, R), hypothesis=long)
    assert rolled.gate is not None
    gate = dataclasses.replace(
        rolled.gate,
        decision=Decision.ROLLED_BACK,
        delta_pct=-3.5,
        pair_gains_pct=(-3.0, -4.0, -3.5),
    )
    s = summarise("c", "/c", [result(1, Status.BASELINE), dataclasses.replace(rolled, gate=gate)])
    text = render_status(s)
    (row,) = [line for line in text.splitlines() if line.strip().startswith("round-2 ")]
    assert "ROLLED BACK" in row and "ROLLED_BACK" in row
    assert fmt_gain(-3.5, gate) in row and "(3 pairs)" in row
    assert "Retile the backward GEMM so that each wave keeps the…" in row  # a whole word
    assert s.to_dict()["round_table"][1]["gain"] == fmt_gain(-3.5, gate)
    assert "noise: not calibrated yet" in text and "running: nothing" in text


def test_summarise_flags_a_broken_chain() -> None:
    worse = score(a=90.0, b=180.0)
    results = chain(A)
    results[1] = result(2, A, worse)
    s = summarise("c", "/c", results)
    assert s.chain_problems and "round-2" in s.chain_problems[0]
    assert "chain integrity: BROKEN" in render_status(s)
    assert s.to_dict()["chain_ok"] is False


def test_status_json_is_one_object() -> None:
    s = summarise("c", "/c", chain(R))
    data = json.loads(json.dumps(s.to_dict()))
    assert data["rounds"] == {"accepted": 0, "rolled_back": 1, "failed": 0}
    assert data["escalation"]["step"] == 1
    assert data["next_round"] == 3
    assert data["extra"] == {}


def test_empty_campaign_status() -> None:
    s = summarise("c", "/c", [])
    assert s.next_round == 1 and s.best_round is None
    assert "no baseline yet" in render_status(s)


# ---- integration: the real demo campaign ---------------------------------------------------
@pytest.mark.integration
def test_status_command_on_demo(demo_campaign: Path) -> None:
    """The demo's verdicts depend on the machine's noise, so the expectations are read
    from its records."""
    results = Campaign.load(demo_campaign).results()
    expected = summarise("x", "x", results)
    root = demo_campaign.parent
    runner = CliRunner()
    res = runner.invoke(cli, ["--campaigns-root", str(root), "status"])
    assert res.exit_code == 0, res.output
    counts = (expected.accepted, expected.rolled_back, expected.failed)
    assert "rounds: {} accepted, {} rolled back, {} failed".format(*counts) in res.output
    assert expected.accepted + expected.rolled_back + expected.failed == 2
    assert "next: round-4" in res.output
    assert "chain integrity: OK" in res.output
    res = runner.invoke(cli, ["--campaigns-root", str(root), "status", "--json"])
    data = json.loads(res.output)
    assert data["next_round"] == 4 and data["unclosed_rounds"] == []
    assert data["best_round"] == expected.best_round
    assert data["consecutive_rollbacks"] == consecutive_rollbacks(results)
    steps = {k: {s["name"] for s in v["steps"]} for k, v in data["step_times"].items()}
    assert {"worker start-up", "fresh steps", "records"} <= steps["baseline"], steps
    assert {"turns", "tamper check: trees before"} <= steps["last_round"], steps


@pytest.mark.integration
def test_status_report_and_mcp_show_one_headline_gain(demo_campaign: Path) -> None:
    campaign = Campaign.load(demo_campaign)
    results = campaign.results()
    headline = headline_gain(results)
    res = CliRunner().invoke(
        cli, ["--campaigns-root", str(demo_campaign.parent), "status", "--json"]
    )
    assert json.loads(res.output)["gain_pct"] == headline.pct_or_none
    text = CliRunner().invoke(cli, ["--campaigns-root", str(demo_campaign.parent), "status"])
    assert f"headline gain: {headline.describe()}" in text.output
    mcp = campaign_status_of(campaign)
    assert mcp.headline_gain_pct == headline.pct_or_none
    status = json.loads(res.output)  # the at-a-glance facts: one source for both
    assert (mcp.sigma_g, mcp.threshold_pct) == (status["sigma_g"], status["threshold_pct"])
    assert mcp.threshold_pct is not None and mcp.threshold_pct >= 2.0
    assert mcp.checkout == status["checkout"] and "at_head" in (mcp.checkout or {})
    report = render_final_report(campaign, results, None, "2026-12-01 12:00")
    assert f"Headline gain, {campaign.manifest.primary_metric} geomean: " in report
    assert headline.describe() in report
    assert f"Headline gain (docs/protocol.md §7.4): {fmt_pct(headline.pct)}" in report


@pytest.mark.integration
def test_status_reports_an_unclosed_round(demo_copy: Path) -> None:
    copy = demo_copy
    (copy / "rounds" / "round-4").mkdir()
    res = CliRunner().invoke(cli, ["--campaigns-root", str(copy.parent), "status", "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["unclosed_rounds"] == [4]


@pytest.mark.integration
def test_campaign_correct_appends_and_the_chain_holds(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reliability.md §7 row 13: `campaign correct` is the recovery the exit-5 text names; a
    correction appends (the earlier bytes stay), the ledger verifies, status stays OK."""
    from runner.store.appendlog import verify

    camp = Campaign.load(demo_copy)
    root = ["--campaigns-root", str(demo_copy.parent)]
    opt, trend = camp.optimize_log.read_bytes(), camp.trend_log.read_bytes()
    code, out = run_cli([*root, "correct", "--round", "2", "--text", "round-2 was quick"], capsys)
    assert code == 0, out
    grown = camp.optimize_log.read_bytes()
    assert grown.startswith(opt) and b"**CORRECTION (" in grown[len(opt) :]
    assert b"> round-2: round-2 was quick" in grown
    code, out = run_cli([*root, "correct", "--round", "2", "--trend", "--text", "a | b"], capsys)
    assert code == 0, out
    assert camp.trend_log.read_bytes().startswith(trend)
    assert "| round-2 (correction) | CORRECTION |" in camp.trend_log.read_text("utf-8")
    verify(camp.optimize_log)
    verify(camp.trend_log)
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "chain integrity: OK" in out, out
    for bad in (["--round", "99"], ["--trend"], ["--text", " "]):
        argv = [*root, "correct", "--text", "x", *bad]
        assert run_cli(argv, capsys)[0] == 2
    # a hand edit: correct refuses (exit 5, nothing appended) and status names the command
    data = camp.optimize_log.read_bytes()
    camp.optimize_log.write_bytes(data.replace(b"## ", b"##X", 1))
    code, out = run_cli([*root, "correct", "--text", "x"], capsys)
    assert code == 5 and len(camp.optimize_log.read_bytes()) == len(data), out
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "`campaign correct --text TEXT`" in out, out


@pytest.mark.integration
def test_status_at_a_glance_running_acceptance_checkout(demo_copy: Path) -> None:
    """`campaign status` on a copy of the demo: sigma_G and the threshold in force, the
    command holding the campaign lock (and the next step waits for it), the last final
    acceptance from its record, the source checkout against the lineage head."""
    campaign = Campaign.load(demo_copy)
    root = ["--campaigns-root", str(demo_copy.parent)]

    def status() -> tuple[str, dict]:  # each costs a probe of Slurm and Docker: few
        s = collect_status(Campaign.load(demo_copy))
        return render_status(s), json.loads(json.dumps(s.to_dict()))

    head = Lineage(Path(campaign.manifest.source), campaign.name, None).head()
    source = Path(campaign.manifest.source)
    # the demo leaves the checkout on main, behind the lineage when its round 3 was
    # ACCEPTED: check it out at the head as a user would before `validate` without --patch
    before = git(source, "rev-parse", "--abbrev-ref", "HEAD").strip()
    main_at = git(source, "rev-parse", "HEAD").strip()
    git(source, "checkout", "-q", "--detach", head)
    try:
        res = CliRunner().invoke(cli, [*root, "status"])
    finally:
        git(source, "checkout", "-q", before)
    assert res.exit_code == 0, res.output
    text = res.output
    sigma = campaign.manifest.sigma_g
    assert sigma is not None
    assert f"{100 * max(0.02, 3 * sigma):.3f}% (docs/protocol.md §5.3)" in text
    assert all(f"round-{n} " in text for n in (1, 2, 3))
    assert "running: nothing" in text and "last acceptance: not run" in text
    assert f"checkout: at the lineage head {head[:12]}" in text

    checks = [Check("full test suite", False, "2 failed")]
    record = Acceptance(
        campaign.name, "2026-12-01 16:00", "2026-12-01 16:09", head=head, checks=checks
    )
    record.step_times = StepTimes([StepTime("full-suite", 1.0, 9.0, "worker start-up")], 12.0)
    write_acceptance(acceptance_dir(campaign), record)
    ident = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*ident, "commit", "-q", "--allow-empty", "-m", "on"], cwd=source, check=True)
    try:
        with campaign.lock():  # a command is running: status names it, next waits for it
            text, data = status()
    finally:  # with TURBO_CAMPAIGN_DEMO_DIR the source is the given demo's own
        subprocess.run(["git", "reset", "-q", "--soft", "HEAD~1"], cwd=source, check=True)
    assert data["running"]["pid"] == os.getpid()
    assert f"(pid {os.getpid()}, since " in text and "next: wait: `" in text
    assert data["acceptance"]["outcome"] == "NOT ACCEPTED"
    accepted = data["step_times"]["acceptance"]
    assert accepted["wall_s"] == 12.0 and accepted["steps"][0]["beside"] == "worker start-up"
    assert "last acceptance: NOT ACCEPTED (2026-12-01 16:09): full test suite: 2 failed" in text
    assert data["checkout"]["at_head"] is False and data["checkout"]["head"] == head
    # the commit sits on main: behind the head when the demo's round 3 was ACCEPTED, on
    # top of it when noise rolled round 3 back too (the head is then main's base)
    expected = "is on top of" if head == main_at else "is not"
    assert f"{expected} the lineage head {head[:12]}" in text
