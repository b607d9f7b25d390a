"""``campaign accept``: the outcome and its records (unit), the branch check on a real git
repository, exit codes, and the whole acceptance on the real demo campaign (integration)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import manifest

from runner.cli import main
from runner.compare.loop import ROUND_CAP_ENV
from runner.core.errors import ConfigError
from runner.core.outcomes import Score, ShapeScore, Status
from runner.core.shapes import shape_set
from runner.flow import accept as accept_mod
from runner.flow.accept import acceptance_shapes
from runner.flow.accept_steps import ACCEPT_STEPS, StepClock, prior_seconds
from runner.flow.acceptance_checks import benchmark_check, extract_csv, lineage_check, suite_check
from runner.flow.acceptance_record import (
    Acceptance,
    Check,
    render_acceptance,
    write_acceptance,
)
from runner.store.acceptance import load_acceptance
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name
from runner.targets.example import EXAMPLE, ExampleTarget

METRIC = "Combined Step TFLOPS"
# The end-to-end acceptance runs this part of the example package's suite as its full
# suite: the file of the op the demo's accepted round changed.  The whole suite (its
# Triton compiles included, ~60 s of CPU) is CI's own first stage (`make test`), and
# the product's command for it is checked below.
SUITE_PART = "python -m pytest tests/test_example_gemm_fp8.py -q"


def score(**values: float) -> Score:
    shapes = tuple(ShapeScore(k, "PASS", v, v, v) for k, v in values.items())
    return Score(METRIC, 1.0, shapes, len(shapes), 0)


def test_outcome_follows_the_checks(tmp_path: Path) -> None:
    a = Acceptance("c", "2026-11-29 10:00", finished="2026-11-29 10:30", heldout=["b"])
    assert not a.accepted  # no check ran: nothing is accepted
    a.checks = [Check("full validation", True, "ok"), Check("branch", True, "linear")]
    assert a.accepted and a.reasons == []
    a.checks.append(Check("full test suite", False, "2 failed"))
    assert not a.accepted
    assert a.reasons == ["full test suite: 2 failed"]
    a.baseline, a.final = score(a=100.0, b=50.0), score(a=120.0, b=49.0)
    write_acceptance(tmp_path, a)
    data = json.loads((tmp_path / "acceptance.json").read_text("utf-8"))
    assert data["outcome"] == "NOT ACCEPTED" and data["schema_version"] == 1
    md = (tmp_path / "acceptance.md").read_text("utf-8")
    assert "Outcome: **NOT ACCEPTED**" in md
    assert "- full test suite: 2 failed" in md
    assert "| b       | held-out | 50.000" in md
    assert "+20.000%" in md
    assert render_acceptance(a) == md


def test_benchmark_and_suite_checks() -> None:
    assert not benchmark_check({"returncode": 1}).ok
    assert not benchmark_check({"returncode": 0, "csv": None}).ok
    assert not benchmark_check({"returncode": 0, "csv": "x.csv", "fail": 2, "command": "c"}).ok
    assert benchmark_check({"returncode": 0, "csv": "x.csv", "fail": 0, "command": "c"}).ok
    ok = suite_check({"command": "pytest", "returncode": 0, "tail": "3 passed in 1s\n"})
    assert ok.ok and "3 passed" in ok.detail
    assert not suite_check({"command": "pytest", "returncode": 1, "tail": ""}).ok


def test_extract_csv_from_a_benchmark_log() -> None:
    log = (
        "loading...\nlabel,M,N,K,Check,Forward TFLOPS\n a,1,2,3,PASS,10.5\n"
        "b,1,2,3,ERROR,nan\ndone, in, 3, s\n"
    )
    text, fail = extract_csv(log)
    assert text is not None and text.startswith("label,M,N,K,Check,Forward TFLOPS\na,1")
    assert fail == 1
    assert extract_csv("no table here\n") == (None, 0)


def test_acceptance_shapes_adds_heldout() -> None:
    labels = [s.label for s in shape_set("cpu")]
    m = manifest(target_shapes=labels[:2], heldout_shapes=[labels[-1]])
    shapes, heldout = acceptance_shapes(m)
    assert [s.label for s in shapes] == [*labels[:2], labels[-1]]
    assert heldout == [labels[-1]]
    with pytest.raises(ConfigError, match="heldout_shapes not in shape set"):
        acceptance_shapes(manifest(heldout_shapes=["nope"]))


def test_load_acceptance_absent_and_bad(tmp_path: Path) -> None:
    c = Campaign.init(tmp_path / "campaigns", manifest())
    assert load_acceptance(c) is None
    (c.root / "acceptance").mkdir()
    (c.root / "acceptance" / "acceptance.json").write_text('{"schema_version": 9}')
    with pytest.raises(ConfigError, match="run `campaign accept` again"):
        load_acceptance(c)


def git(cwd: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    env |= {"GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    )
    return proc.stdout.strip()


def repo_with(tmp_path: Path, *messages: str) -> tuple[Path, str, list[str]]:
    src = tmp_path / "src"
    src.mkdir()
    git(src, "init", "-q", "-b", "main")
    (src / "k.py").write_text("0\n")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "base")
    base = git(src, "rev-parse", "HEAD")
    commits = []
    for i, msg in enumerate(messages, 1):
        (src / "k.py").write_text(f"{i}\n")
        git(src, "commit", "-q", "-am", msg)
        commits.append(git(src, "rev-parse", "HEAD"))
    return src, base, commits


@pytest.mark.integration
@pytest.mark.parametrize(
    ("messages", "ok", "why"),
    [
        (["[optimize] gemm TRITON round-3: fold"], True, "linear, 1 [optimize] commit"),
        (["wip: try something"], False, "does not start with '[optimize] '"),
    ],
)
def test_lineage_check(tmp_path: Path, messages: list[str], ok: bool, why: str) -> None:
    src, base, commits = repo_with(tmp_path, *messages)
    m = manifest(source=str(src), base_commit=base)
    lineage = Lineage(src, m.campaign_name, branch_name(m))
    git(src, "update-ref", lineage.ref, commits[-1])
    git(src, "update-ref", f"refs/heads/{branch_name(m)}", commits[-1])
    check, found = lineage_check(lineage, m, commits)
    assert check.ok is ok and why in check.detail
    assert found == commits


@pytest.mark.integration
def test_lineage_check_counts_commits_and_branch(tmp_path: Path) -> None:
    src, base, commits = repo_with(tmp_path, "[optimize] a", "[optimize] b")
    m = manifest(source=str(src), base_commit=base)
    lineage = Lineage(src, m.campaign_name, branch_name(m))
    git(src, "update-ref", lineage.ref, commits[-1])
    check, _ = lineage_check(lineage, m, commits[:1])
    assert not check.ok
    assert "2 commit(s) but 1 round(s) were accepted" in check.detail
    assert "is at nothing, not the lineage head" in check.detail


def test_exit_codes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    Campaign.init(tmp_path / "campaigns", manifest())
    root = ["--campaigns-root", str(tmp_path / "campaigns")]
    with pytest.raises(SystemExit) as exc:
        main([*root, "accept"])  # no baseline: bad input
    assert exc.value.code == 2

    def fake(*_: object, **__: object) -> Acceptance:
        return Acceptance("c", "t", checks=[Check("full test suite", False, "1 failed")])

    monkeypatch.setattr(accept_mod, "run_acceptance", fake)
    with pytest.raises(SystemExit) as exc:
        main([*root, "accept"])
    assert exc.value.code == 3


def test_the_example_full_suite_is_the_whole_test_folder() -> None:
    """What `campaign accept` runs as the example package's full suite (the end-to-end
    test below runs a part of it)."""
    assert EXAMPLE.full_suite_command() == "python -m pytest tests -q"


# ---- integration: the whole acceptance on the demo -------------------------------------------
@pytest.mark.integration
def test_accept_end_to_end_then_report(
    demo_copy: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The full-validation verdict depends on the machine's noise (and on whether the
    demo accepted its speed-up); everything else is deterministic.  The full suite is
    ``SUITE_PART``: the acceptance records the command it ran."""
    monkeypatch.setattr(ExampleTarget, "full_suite_command", lambda self: SUITE_PART)
    # that verdict is not asserted: its first pairs are final (the demo's small gain is
    # otherwise measured up to the suite's cap, conftest WORKER_LIMITS)
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    root = ["--campaigns-root", str(demo_copy.parent)]
    with pytest.raises(SystemExit) as exc:
        main([*root, "accept", "--passes", "1"])
    out, err = capsys.readouterr()
    folder = demo_copy / "acceptance"
    data = json.loads((folder / "acceptance.json").read_text("utf-8"))
    assert exc.value.code == (0 if data["outcome"] == "ACCEPTED" else 3), out
    assert f"final acceptance: {data['outcome']}" in out
    checks = {c["name"]: c for c in data["checks"]}
    expected = ["full validation", "full benchmark", "full test suite", "branch"]
    if data["heldout_shapes"]:  # init holds shapes out by default; accept judges them
        expected.insert(0, "held-out shapes")
    assert list(checks) == expected
    assert checks["full benchmark"]["ok"] and checks["full test suite"]["ok"], checks
    assert checks["branch"]["ok"], checks["branch"]
    gate = data["gate"]
    assert gate is not None and len(data["final_score"]["shapes"]) == len(data["shapes"])
    # whichever rule decided (an accept on the threshold too), the verdict carries each
    # shape's paired evidence: the held-out check judges on it (docs/protocol.md §5.7)
    pairs = len(gate["pair_gains_pct"])
    evidence = gate["evidence"]["shapes"]
    assert set(evidence) == set(data["shapes"]) and pairs >= 2, gate
    assert all(e["pairs"] == pairs and e["half_width_pct"] is not None for e in evidence.values())
    results = Campaign.load(demo_copy).results()
    accepted_rounds = [r for r in results if r.status is Status.ACCEPTED]
    if not accepted_rounds:
        assert "no round was accepted" in checks["full validation"]["detail"]
    assert checks["full validation"]["ok"] == (
        bool(accepted_rounds) and gate["decision"] in ("ACCEPTED", "ACCEPTED_TRADEOFF")
    )
    assert len(data["commits"]) == len(accepted_rounds)
    assert data["full_suite"]["command"] == SUITE_PART
    assert "passed" in (folder / "artifacts" / "full_suite.log").read_text("utf-8")
    header = (folder / "artifacts" / "full_benchmark.csv").read_text("utf-8").splitlines()[0]
    assert header.startswith("label,B,M,N,K,Check,")
    # the example's full benchmark is the worker at level full: full validation's final
    # role ran exactly that, so its CSV is the benchmark, not timed a second time
    bench = folder / "artifacts" / "full_benchmark.csv"
    assert data["full_benchmark"]["from_full_validation"] is True
    assert bench.read_bytes() == (folder / "artifacts" / "final.csv").read_bytes()
    assert not (folder / "artifacts" / "passes" / "full-benchmark").exists()
    # each step timed, announced, recorded (docs/protocol.md §1.4)
    assert list(data["step_seconds"]) == list(ACCEPT_STEPS), data["step_seconds"]
    for i, step in enumerate(ACCEPT_STEPS, 1):
        assert f"accept: step {i}/{len(ACCEPT_STEPS)}: {step} (" in err, err  # progress
    assert "## Where the time went" in (folder / "acceptance.md").read_text("utf-8")
    for name in ("baseline.csv", "final.csv"):
        assert (folder / "artifacts" / name).is_file()
    assert f"Outcome: **{data['outcome']}**" in (folder / "acceptance.md").read_text("utf-8")
    with pytest.raises(SystemExit) as exc:
        main([*root, "report"])
    assert exc.value.code == 0
    # the final report is regenerated into report/, never appended to the logs
    report = (demo_copy / "report" / "final_report.md").read_text("utf-8")
    assert "Source: full validation by `campaign accept`" in report
    assert f"Final acceptance: **{data['outcome']}**" in report


def test_accept_steps_estimate_the_time_left_from_the_last_acceptance(tmp_path: Path) -> None:
    """The first acceptance has no estimate for its steps; the next one reads the
    seconds per step the last one recorded in acceptance.json and counts them down."""
    said: list[str] = []
    first = StepClock(said.append, "round-0", ACCEPT_STEPS, prior_seconds(tmp_path / "none"))
    for step in ACCEPT_STEPS:
        with first.step(step):
            pass
    assert said[0].startswith("round-0: step 1/4: worktrees and builds (0 s elapsed)")
    assert not any("left" in line for line in said)
    record = Acceptance(
        "c", "t", step_seconds={**first.seconds, "full validation": 100.0, "full test suite": 30.0}
    )
    write_acceptance(tmp_path, record)
    prior = prior_seconds(tmp_path / "acceptance.json")
    said.clear()
    second = StepClock(said.append, "round-0", ACCEPT_STEPS, prior)
    with second.step("full validation"):
        pass
    with second.step("full test suite"):
        pass
    assert "step 2/4: full validation" in said[0] and "about 2 min 10 s left" in said[0]
    assert "step 4/4: full test suite" in said[1] and "about 30 s left" in said[1]
    assert set(second.seconds) == {"full validation", "full test suite"}
