"""The wheel works outside the checkout: built from the repository, installed into a
fresh virtual environment, ``campaign demo`` runs from an empty folder with the demo's
verdicts.  That demo is the session's demo campaign (conftest ``demo_campaign``, built
by ``wheel_helpers.installed_demo``), so the suite runs the demo once.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from wheel_helpers import DEMO_DIR_ENV, ROOT, demo_of, installed_demo, run


def _result(campaign: Path, n: int) -> dict[str, Any]:
    path = campaign / "rounds" / f"round-{n}" / "result.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.integration
def test_installed_wheel_runs_the_demo_from_an_empty_folder(
    demo_campaign: Path, tmp_path: Path
) -> None:
    """The session's demo campaign is this wheel's demo (conftest ``demo_campaign``);
    with a demo of yours given (``TURBO_CAMPAIGN_DEMO_DIR``) the test runs its own."""
    if os.environ.get(DEMO_DIR_ENV):
        demo = installed_demo(tmp_path)
    else:
        demo = demo_of(demo_campaign.parent)
    where = run(
        [
            str(demo.venv / "bin" / "python"),
            "-c",
            "import importlib.util as u, runner.flow.new_campaign as n; "
            "print(n.__file__); print(n.EXAMPLES_DIR); print(u.find_spec('turbo_kernels'))",
        ],
        demo.empty,
    ).splitlines()
    assert where[0].startswith(str(demo.venv)), where  # the installed runner, not the checkout
    assert where[1].startswith(str(demo.venv)) and where[1].endswith("_examples"), where
    assert where[2] == "None", where  # the example package is not importable on its own

    out = demo.output
    lines = out.splitlines()
    assert "round-1: BASELINE" in lines, out
    assert any(line.startswith("round-2: ROLLED BACK") for line in lines), out
    campaign = Path(lines[-1].removeprefix("campaign: "))
    assert campaign.parent == demo.campaigns_root.resolve(), out
    slowdown = _result(campaign, 2)
    assert slowdown["gate"]["delta_pct"] < 0, slowdown["gate"]
    speedup = _result(campaign, 3)
    # On a quiet CPU the speed-up (about +18%) is ACCEPTED.  On a heavily loaded host
    # (seen at load 12 on 2 cores: +9% and +4% measured) the gate may not confirm it,
    # and its sign is not this test's to judge: in the suite at 57a80d4 (2026-12-04) its
    # two pairs read -14.49% and +16.40% (-0.24% in all) while the session's other
    # rounds ran beside it.  The verdict is the gate's business (tests/test_gate.py).
    # What this test needs is that the installed wheel measured both patches to the
    # end: the slow-down (twice the effect) slower, every shape of the speed-up
    # measured in pairs and checked, every round closed.
    assert speedup["status"] in ("ACCEPTED", "ROLLED BACK"), speedup["status"]
    evidence = speedup["gate"]["evidence"]["shapes"]
    assert all(e["pairs"] >= 2 for e in evidence.values()), speedup["gate"]
    assert all(s["check"] == "PASS" for s in speedup["score"]["shapes"]), speedup["score"]
    # the demo measured a fresh copy of the bundled package, made from the wheel's copy
    sources = list((demo.campaigns_root / "sources").iterdir())
    assert len(sources) == 1 and (sources[0] / "turbo_kernels" / "__init__.py").is_file()
    assert (sources[0] / "demo_patches" / "speedup_reuse_fp8_weight.patch").is_file()
    # the slow-down was the checkout's edit: its rollback put the checkout back to the
    # lineage head (Rule 3) and kept the edit under a ref the round's reasons name
    assert run(["git", "status", "--porcelain"], sources[0]) == "", "checkout not restored"
    restored = [r for r in slowdown["reasons"] if r.startswith("checkout restored:")]
    ref = f"refs/campaigns/{campaign.name}/rolled-back/round-2"
    assert restored and ref in restored[0], slowdown["reasons"]
    kept = run(["git", "show", f"{ref}:turbo_kernels/cpu/gemm_fp8.py"], sources[0])
    assert "ACCUM_DTYPE = torch.float64" in kept
    # the demo leaves its checkout at the lineage head: the next edit starts from the
    # accepted kernel, and a round of it does not undo the accepted round
    head = run(["git", "rev-parse", f"refs/campaigns/{campaign.name}/head"], sources[0])
    assert run(["git", "rev-parse", "HEAD"], sources[0]) == head
    if speedup["status"] == "ACCEPTED":  # which rule accepted it, and what the ± is
        assert any(ln.startswith("  accepted by the gate: ") for ln in lines), out


def test_a_missing_example_package_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.core.errors import ConfigError
    from runner.flow import new_campaign as newcampaign

    assert newcampaign.examples_dir() == ROOT / "examples"  # a checkout reads it in place
    monkeypatch.setattr(newcampaign, "EXAMPLES_DIR", tmp_path / "nothing")
    with pytest.raises(ConfigError, match="built without it; reinstall"):
        newcampaign.fresh_example_copy(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
