"""Words people read: a rolled-back round prints its verdict, not an error (exit code 3
kept); `make validate` names what is missing; the summaries' names for the measuring
order and the cache simulation are the code's (on the real demo campaign, measured by
the local executor's paired workers)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from runner.cli import main, validate_cmd
from runner.core.errors import RolledBack
from runner.core.outcomes import Status
from runner.flow.validate import Request
from runner.store.campaign import Campaign
from runner.worker.bench.statecheck import STEPS

ROOT = Path(__file__).resolve().parent.parent


def test_a_rollback_prints_its_verdict_not_an_error(
    demo_campaign: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's round-2 (a slow-down) is rolled back; `validate` replays it."""
    campaign = Campaign.load(demo_campaign)
    rolled = campaign.load_result(2)
    assert rolled.status is Status.ROLLED_BACK

    def replay(_c: Campaign, _e: object, request: Request, **_kw: object) -> object:
        assert request.round == 2
        return rolled

    monkeypatch.setattr(validate_cmd, "validate_round", replay)
    args = ["--campaigns-root", str(demo_campaign.parent), "validate", "--round", "2"]
    with pytest.raises(SystemExit) as exc:
        main([*args, "--hypothesis", "float64 accumulation"])
    assert exc.value.code == RolledBack.return_code == 3
    out, err = capsys.readouterr()
    assert "round-2: ROLLED BACK" in out
    assert "error:" not in err
    assert "verdict: round-2 ROLLED BACK; the lineage is unchanged" in err


def test_make_validate_names_a_missing_hypothesis() -> None:
    make = ["make", "-s", "-o", "install", "-o", ".venv/.installed", "validate"]
    res = subprocess.run([*make, "ROUND=4"], cwd=ROOT, capture_output=True, text=True)
    assert res.returncode != 0
    assert "make validate needs HYPOTHESIS=" in res.stdout + res.stderr, res
    res = subprocess.run(make, cwd=ROOT, capture_output=True, text=True)
    assert "make validate needs ROUND=N" in res.stdout + res.stderr, res


def test_summaries_name_the_order_and_the_simulation_as_the_code_runs_them(
    demo_campaign: Path,
) -> None:
    campaign = Campaign.load(demo_campaign)
    for n in (2, 3):
        text = campaign.summary_path(n).read_text(encoding="utf-8")
        assert "A B B A turns of long-lived workers (A the incumbent, B the candidate" in text
        assert "B C C B" not in text  # the local executor runs no fresh process per pass
        assert f"- {STEPS}-step hit-rate trace:" in text
    protocol = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = protocol.split("### 8.4", 1)[1].split("###", 1)[0]
    assert re.search(rf"\b{STEPS}-step simulation\b", section), section
