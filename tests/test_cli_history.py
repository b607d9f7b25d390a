"""`campaign rounds`, `campaign show N` and `validate --json`: the CLI side of the MCP
tools `list_rounds` and `round_summary`, on the real demo campaign."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from campaign_helpers import git
from click.testing import CliRunner

from runner.cli import baseline_cmd, cli, validate_cmd
from runner.cli.mcp_models import round_infos, round_report
from runner.cli.mcp_server import TurboTools
from runner.core.errors import Verdict
from runner.core.outcomes import Status
from runner.render.figures import fmt_gain
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage


def _run(demo: Path, *args: str) -> str:
    res = CliRunner().invoke(cli, ["--campaigns-root", str(demo.parent), *args])
    assert res.exit_code == 0, res.output
    return res.output


def test_rounds_lists_every_round_as_the_mcp_tool_does(demo_campaign: Path) -> None:
    campaign = Campaign.load(demo_campaign)
    table = _run(demo_campaign, "rounds")
    lines = table.splitlines()
    assert lines[0].split() == ["Round", "Status", "Decision", "Gain", "vs", "best", "Hypothesis"]
    for r in campaign.results():
        row = next(line for line in lines if line.startswith(f"round-{r.round} "))
        assert r.status.value in row
        if r.gate is not None:
            assert r.gate.decision.value in row and fmt_gain(r.gate.delta_pct, r.gate) in row
            assert r.hypothesis.split()[0] in row
    data = json.loads(_run(demo_campaign, "rounds", "--json"))
    tool = TurboTools(demo_campaign.parent).list_rounds(campaign.name)
    assert data == [i.model_dump(mode="json") for i in tool]
    assert data == [i.model_dump(mode="json") for i in round_infos(campaign)]
    assert [d["round"] for d in data] == [1, 2, 3]


def test_show_prints_the_summary_as_the_mcp_tool_does(demo_campaign: Path) -> None:
    campaign = Campaign.load(demo_campaign)
    text = _run(demo_campaign, "show", "2")
    assert text == campaign.summary_path(2).read_text(encoding="utf-8")
    data = json.loads(_run(demo_campaign, "show", "2", "--json"))
    assert data == TurboTools(demo_campaign.parent).round_summary(2).model_dump(mode="json")
    res = CliRunner().invoke(cli, ["--campaigns-root", str(demo_campaign.parent), "show", "9"])
    assert res.exit_code != 0


def test_validate_json_prints_the_closed_round(
    demo_campaign: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's round-3 replayed through `validate --json` (no round is measured)."""
    campaign = Campaign.load(demo_campaign)
    closed = campaign.load_result(3)
    monkeypatch.setattr(validate_cmd, "validate_round", lambda *a, **k: closed)
    args = ["validate", "--round", "3", "--hypothesis", "x", "--json"]
    res = CliRunner().invoke(cli, ["--campaigns-root", str(demo_campaign.parent), *args])
    if closed.status is Status.ROLLED_BACK:  # a verdict: main() makes it exit 3
        assert isinstance(res.exception, Verdict), res.output
        assert res.exception.return_code == 3
    else:
        assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data == round_report(campaign, 3).model_dump(mode="json")
    assert closed.gate is not None
    assert data["result"]["gate"]["pair_gains_pct"] == list(closed.gate.pair_gains_pct)


def test_status_json_holds_what_status_prints(demo_campaign: Path) -> None:
    text = _run(demo_campaign, "status")
    data = json.loads(_run(demo_campaign, "status", "--json"))
    assert f"next: round-{data['next_round']}" in text
    assert f"consecutive rollbacks: {data['consecutive_rollbacks']}" in text
    counts = data["rounds"]
    assert f"rounds: {counts['accepted']} accepted, {counts['rolled_back']} rolled back" in text
    for row in data["round_table"]:  # the table of rounds, as printed
        assert row["hypothesis"] in text and (row["gain"] or "—") in text
    assert [row["round"] for row in data["round_table"]] == [1, 2, 3]
    assert f"= {data['threshold_pct']:.3f}% (docs/protocol.md §5.3)" in text
    assert data["sigma_g"] == Campaign.load(demo_campaign).manifest.sigma_g
    assert data["acceptance"] is None  # (another worker may hold the shared demo's lock)
    # the demo leaves the checkout on main: at the lineage head unless its round 3 was
    # ACCEPTED (a loaded machine can roll it back), so the answer is checked, not assumed
    camp = Campaign.load(demo_campaign)
    lineage = Lineage(Path(camp.manifest.source), camp.name, None)
    checked_out = git(Path(camp.manifest.source), "rev-parse", "HEAD").strip()
    assert data["checkout"]["at_head"] is (checked_out == lineage.head())


def test_baseline_json_prints_the_closed_baseline(
    demo_campaign: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo's round-1 replayed through `baseline --json` (nothing is measured):
    stdout is the one JSON object `campaign show 1 --json` prints."""
    campaign = Campaign.load(demo_campaign)
    monkeypatch.setattr(baseline_cmd, "run_baseline", lambda *a, **k: campaign.load_result(1))
    res = CliRunner().invoke(
        cli, ["--campaigns-root", str(demo_campaign.parent), "baseline", "--json", "--quiet"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout) == round_report(campaign, 1).model_dump(mode="json")


def test_accept_json_prints_the_acceptance_record(
    demo_campaign: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`accept --json`: the acceptance record on stdout; NOT ACCEPTED keeps exit 3."""
    from runner.core.errors import NotAccepted
    from runner.flow import accept
    from runner.flow.acceptance_record import Acceptance, Check

    record = Acceptance(
        "c",
        "2026-12-01 16:00",
        "2026-12-01 16:09",
        head="abc",
        checks=[Check("branch check", False, "behind")],
    )
    monkeypatch.setattr(accept, "run_acceptance", lambda *a, **k: record)
    res = CliRunner().invoke(
        cli, ["--campaigns-root", str(demo_campaign.parent), "accept", "--json", "--quiet"]
    )
    assert isinstance(res.exception, NotAccepted) and res.exception.return_code == 3
    data = json.loads(res.stdout)
    assert data == record.to_dict() and data["outcome"] == "NOT ACCEPTED"
