"""Upstream's loop rules, mechanised (docs/upstream-loop.md; Primus-Turbo's iteration_rules.mdc and
optimize-loop.md, checked at a6a16cdc).  The termination check as a step of the loop
(docs/protocol.md §7.2): `status` shows it, a round past max_iterations is refused until
`campaign set` raises the limit (recorded), and `campaign report` appends the
Termination Check and the Final Report to optimize.md once, at the end.  Rule 7: a
hypothesis or patch already judged is refused.  A real campaign folder of the example
package with synthetic closed rounds (no round is measured)."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from campaign_helpers import run_cli, tiny_campaign

from runner.cli.validate_cmd import print_termination
from runner.compare.shapes import level_shapes
from runner.core.errors import ConfigError, RepeatedHypothesis, RoundOutOfOrder, ValueRefused
from runner.core.outcomes import (
    Decision,
    GateResult,
    RollbackAnalysis,
    RoundResult,
    Score,
    ShapeScore,
    Status,
)
from runner.flow.report import write_report
from runner.render.final_report import render_final_report
from runner.render.markdown import shape_table
from runner.render.status import collect_status
from runner.round.logs import close_round
from runner.round.result import (
    Request,
    check_diagnosis,
    check_new,
    check_round_number,
    check_targeted,
)
from runner.store.appendlog import verify
from runner.store.campaign import Campaign
from runner.store.record_writer import append_final_report
from runner.store.roundfiles import write_diagnosis

METRIC = "Combined Step TFLOPS"
BASE = Score(METRIC, 100.0, (ShapeScore("a", "PASS", 100.0, 100.0, 100.0),), 1, 0)


def _round(n: int, status: Status) -> RoundResult:
    gate = None
    if n > 1:
        decision = Decision.ACCEPTED if status is Status.ACCEPTED else Decision.ROLLED_BACK
        gate = GateResult(decision, METRIC, 1.0, 1.0, -1.0, (), (), ())
    rollback = RollbackAnalysis("c", "e", "a", "r", "l") if status is Status.ROLLED_BACK else None
    return RoundResult(
        round=n,
        status=status,
        level="full" if n == 1 else "quick",
        hypothesis=f"idea {n}",
        change="k.py",
        description=f"idea {n}",
        started="2026-12-03 10:00",
        finished="2026-12-03 10:05",
        test_command="t",
        benchmark_command="b",
        score=BASE,
        baseline=BASE,
        best=None if n == 1 else BASE,
        gate=gate,
        rollback=rollback,
    )


def _campaign(root: Path, closed: list[Status], **fields: object) -> Campaign:
    campaign = tiny_campaign(root, "term", baseline=False, **fields)
    for n, status in enumerate(closed, start=1):
        campaign.snapshot_dir(n).mkdir(parents=True)
        close_round(campaign, _round(n, status))
    return Campaign.load(campaign.root)


def test_a_round_past_max_iterations_is_refused_until_the_limit_is_raised(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    statuses = [Status.BASELINE, Status.ROLLED_BACK, Status.ROLLED_BACK]
    campaign = _campaign(tmp_path, statuses, max_iterations=2)
    with pytest.raises(RoundOutOfOrder, match=r"campaign set max_iterations 3"):
        check_round_number(campaign, 4)
    root = ["--campaigns-root", str(campaign.root.parent)]
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0, out
    assert "T3 max_iterations: MET — 2 of 2 attempt rounds used" in out
    assert "rollbacks in a row: 2 (a stagnation review is due, not a stop)" in out
    assert "verdict: the campaign may end (T3 holds)" in out
    assert "escalation: step 2: profile: stagnation review" in out  # Rule 7, upstream's step
    assert "undiagnosed rollbacks: round-2, round-3 (Rule 7" in out
    print_termination(campaign)  # what `validate` prints after its round
    out = capsys.readouterr().out
    assert out.startswith("termination check:\n  T1 performance target: not set\n"), out
    assert "  verdict: the campaign may end (T3 holds)" in out
    code, out = run_cli([*root, "set", "max_iterations", "3", "--reason", "one more idea"], capsys)
    assert code == 0, out
    campaign = Campaign.load(campaign.root)
    assert campaign.manifest.max_iterations == 3
    assert "loop field max_iterations: 2 -> 3" in campaign.optimize_log.read_text("utf-8")
    verify(campaign.optimize_log)
    check_round_number(campaign, 4)


def test_report_appends_the_termination_check_and_final_report_once_at_the_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    campaign = _campaign(tmp_path, [Status.BASELINE, Status.ROLLED_BACK], max_iterations=5)
    before = campaign.optimize_log.read_bytes()
    code, out = run_cli(["--campaigns-root", str(campaign.root.parent), "report"], capsys)
    assert code == 0 and "termination check: none of T1-T4 holds" in out, out
    assert campaign.optimize_log.read_bytes() == before
    assert write_report(campaign, user_stop=True, when="2026-12-03 11:00").appended
    assert not append_final_report(campaign, "\n### Termination Check\n")  # once only
    text = campaign.optimize_log.read_text("utf-8")
    assert text.count("\n### Termination Check\n") == 1 and text.count("\n## Final Report (") == 1
    block = text.split("\n### Termination Check\n", 1)[1]
    assert "- T3 max_iterations reached: ❌ (T3 max_iterations: NOT MET — 1 of 5" in block
    assert "- T4 user requested stop: ✅" in block and "-> Satisfied condition(s): T4" in block
    assert block.index("-> Satisfied") < block.index("## Final Report (")
    verify(campaign.optimize_log)


def test_a_hypothesis_or_patch_already_judged_is_refused_naming_the_round(tmp_path: Path) -> None:
    campaign = _campaign(tmp_path, [Status.BASELINE, Status.ROLLED_BACK, Status.FAILED])
    (campaign.round_dir(2) / "candidate.patch").write_text("diff --git a/k b/k\n+x\n")
    with pytest.raises(RepeatedHypothesis, match=r"round-2 \(ROLLED BACK\)") as words:
        check_new(campaign, "  Idea   2 ", "other")
    with pytest.raises(RepeatedHypothesis, match=r"round-2's \(ROLLED BACK\)") as patch:
        check_new(campaign, "a new idea", "diff --git a/k b/k\n+x\n")
    assert (words.value.earlier, words.value.same) == (2, "hypothesis")
    assert (patch.value.earlier, patch.value.same) == (2, "bytes")
    check_new(campaign, "idea 3", "other")  # round-3 FAILED: it may be measured again


def test_a_rollback_diagnosis_is_given_with_the_next_round(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """validate --root-cause/--lesson (--attribution) fill the last rollback's diagnosis:
    its diagnosis.json and an optimize.md entry; status then no longer lists it."""
    campaign = _campaign(tmp_path, [Status.BASELINE, Status.ROLLED_BACK])
    given = (("attribution", "the fp64 path"), ("root_cause", "2x FLOPs"), ("lesson", "fp32"))
    assert collect_status(campaign).undiagnosed == [2]
    with pytest.raises(ConfigError, match="needs --root-cause TEXT and --lesson TEXT"):
        check_diagnosis(campaign, Request(3, "h", None, diagnosis=given[:2]))
    assert check_diagnosis(campaign, Request(3, "h", None)) is None
    assert check_diagnosis(campaign, Request(3, "h", None, diagnosis=given)) == 2
    write_diagnosis(campaign, 2, 3, dict(given))
    assert collect_status(campaign).undiagnosed == []
    log = campaign.optimize_log.read_text("utf-8")
    assert "#### round-2 rollback diagnosis (given with round-3)\n- Attribution: the fp64" in log
    assert "- Root cause: 2x FLOPs\n- Lesson: fp32\n" in log
    verify(campaign.optimize_log)
    argv = [
        "--campaigns-root",
        str(campaign.root.parent),
        "validate",
        "--round",
        "3",
        "--hypothesis",
        "h",
        "--root-cause",
        "x",
    ]
    code, out = run_cli(argv, capsys)
    assert code == 2 and "round-2's rollback needs --root-cause TEXT and --lesson" in out, out
    accepted = _campaign(tmp_path / "b", [Status.BASELINE, Status.ACCEPTED])
    with pytest.raises(ConfigError, match="round-2 is ACCEPTED: leave them out"):
        check_diagnosis(accepted, Request(3, "h", None, diagnosis=given))


def test_the_shape_table_has_latency_delta_and_snr_per_shape() -> None:
    """Rule 4: summary.md's results per shape: TFLOPS, latency, delta, SNR."""
    cand = Score(
        METRIC, 120.0, (ShapeScore("a", "PASS", 120.0, 150.0, 100.0, 1.25, 2.5, 38.2),), 1, 0
    )
    table = shape_table(cand, BASE)
    header, _, row = table.splitlines()[:3]
    assert "Latency fwd / bwd (ms)" in header and "Δ vs the incumbent in this round" in header
    assert "SNR (dB, worst)" in header
    assert "1.25 / 2.5" in row and "+20.000%" in row and "38.2" in row


def test_a_targeted_round_names_measured_shapes(tmp_path: Path) -> None:
    """validate --target-shape LABEL (Rule 3's exception): a label the round's level does
    not measure is refused up front; a measured one is carried to the gate
    (runner.compare.loop.Comparison.targeted); a tournament refuses it."""
    campaign = _campaign(tmp_path, [Status.BASELINE])
    shapes = level_shapes(campaign.manifest, "full")
    label = shapes[0].label
    check_targeted(Request(2, "h", None, level="full", targeted=(label,)), shapes)
    with pytest.raises(ValueRefused, match=r"--target-shape nope"):
        check_targeted(Request(2, "h", None, level="full", targeted=(label, "nope")), shapes)
    # a tournament judges every entry on its level's shapes: it refuses the flag before
    # anything is written (it measured the entries untargeted without saying so)
    from runner.executors.local import LocalExecutor
    from runner.flow.validate import validate

    two = [
        Request(2, "h1", "diff --git a/a b/a\n", level="full", targeted=(label,)),
        Request(3, "h2", "diff --git a/b b/b\n", level="full", targeted=(label,)),
    ]
    with pytest.raises(ConfigError, match=r"--target-shape judges a single round"):
        validate(campaign, LocalExecutor(), two, progress=lambda _m: None)
    assert not campaign.round_dir(2).exists()


def test_the_final_report_has_latency_and_snr_per_shape(tmp_path: Path) -> None:
    """Rule 4 in the report: the final best's latency and SNR beside each shape's change."""
    campaign = _campaign(tmp_path, [Status.BASELINE])
    best = ShapeScore("a", "PASS", 120.0, 150.0, 100.0, 1.25, 2.5, 38.2)
    final = replace(_round(2, Status.ACCEPTED), score=Score(METRIC, 120.0, (best,), 1, 0))
    text = render_final_report(campaign, [*campaign.results(), final], None, "2026-12-03 12:00")
    table = text.split("### Baseline vs final best")[1]
    header, _, row = table.split("\n\n")[2].splitlines()[:3]
    assert "Final latency fwd / bwd (ms)" in header and "Final SNR (dB, worst)" in header
    assert [c.strip() for c in row.split("|")[4:7]] == ["+20.000%", "1.25 / 2.5", "38.2"]


# Upstream's optimization log template (agent/skills/kernel-optimize/workflow/
# optimize-loop.md, "Optimization Log Template", Primus-Turbo a6a16cdc), the lines that
# hold the Current Best and the directions, as upstream writes them.
UPSTREAM_CURRENT_BEST = """## Current Best
| Shape (MxNxK) | Baseline | Current Best | Improvement |
|---------------|----------|-------------|-------------|
| ... | ... | ... | ... |
- Aggregate score: baseline <X> → current <Y> (+Z%)"""
UPSTREAM_DIRECTIONS = """## Directions to Try
- [ ] <Direction 1>
- [ ] <Direction 2>
- [x] ~~<Verified ineffective direction>~~ (verified in round-N)

## Verified Ineffective Directions
| Direction | Version | Failure Reason |
|-----------|---------|---------------|
| ... | round-N | ... |"""


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _form(line: str) -> str:
    """A line of the log as its kind: a table header's cells, a checkbox item with its
    text replaced, the aggregate line with its figures replaced, a heading as it is."""
    if line.startswith("- [x] ~~"):
        return re.sub(r"~~.*~~ \(verified in round-\d+\)", "~~D~~ (verified in round-N)", line)
    if line.startswith("- [ ] "):
        return "- [ ] D"
    if line.startswith("- Aggregate score: "):
        return re.sub(
            r"baseline \S+ → current \S+ \([+-][\d.]+%\)", "baseline X → current Y (Z)", line
        )
    return line


def _upstream_form(template: str) -> list[str]:
    out = []
    for line in template.splitlines():
        line = line.replace("<X>", "0").replace("<Y>", "0").replace("(+Z%)", "(+0%)")
        line = re.sub(r"<[^>]*>", "D", line).replace("round-N", "round-1")
        out.append(_form(line))
    return out


def test_every_round_appends_current_best_and_directions_as_upstream_writes_them(
    tmp_path: Path,
) -> None:
    """optimize-loop.md's VALIDATE step: after each round, optimize.md says the current
    best and the directions to try (a6a16cdc), under upstream's headings, with its table
    columns, its aggregate line and its checkboxes; the log stays append-only."""
    campaign = _campaign(tmp_path, [Status.BASELINE])
    better = Score(METRIC, 110.0, (ShapeScore("a", "PASS", 110.0, 110.0, 110.0),), 1, 0)
    campaign.snapshot_dir(2).mkdir(parents=True)
    close_round(
        campaign,
        replace(_round(2, Status.ACCEPTED), score=better, next_direction="deeper pipelining"),
    )
    for n in (3, 4):
        campaign.snapshot_dir(n).mkdir(parents=True)
        close_round(campaign, replace(_round(n, Status.ROLLED_BACK), next_direction=f"next {n}"))
    log = campaign.optimize_log.read_text("utf-8")
    entries = log.split("\n### round-")[1:]
    assert len(entries) == 4
    for entry in entries:  # each round's own copy, after its history entry
        assert entry.count("\n## Current Best\n") == 1
        assert entry.count("\n## Directions to Try\n") == 1
        assert entry.count("\n## Verified Ineffective Directions\n") == 1
    last = entries[-1]
    best = last.split("\n## Current Best\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert _cells(best[0]) == _cells(UPSTREAM_CURRENT_BEST.splitlines()[1])
    assert _cells(best[2]) == ["a", "100.000", "110.000", "+10.000%"]
    assert best[3] == "- Aggregate score: baseline 100.000 → current 110.000 (+10.000%)"
    assert [_form(x) for x in (best[3],)] == _upstream_form(UPSTREAM_CURRENT_BEST)[-1:]
    directions = "## Directions to Try\n" + last.split("\n## Directions to Try\n", 1)[1]
    items, table = directions.split("\n\n## Verified Ineffective Directions\n")
    lines = items.splitlines()
    assert lines[0] == "## Directions to Try"
    assert lines[1] == "- [ ] next 4 (from round-4)"
    assert lines[2].startswith("- [ ] escalation step 2: profile: stagnation review")
    assert lines[-2:] == [
        "- [x] ~~idea 3~~ (verified in round-3)",
        "- [x] ~~idea 4~~ (verified in round-4)",
    ]
    kinds = {_form(x) for x in lines}
    assert kinds <= set(_upstream_form(UPSTREAM_DIRECTIONS))
    head, _, *rows = table.splitlines()
    assert _cells(head) == _cells(UPSTREAM_DIRECTIONS.splitlines()[-3])
    assert [_cells(r)[:2] for r in rows] == [["idea 3", "round-3"], ["idea 4", "round-4"]]
    after_2 = entries[1].split("\n## Directions to Try\n", 1)[1]
    assert after_2.startswith("- [ ] deeper pipelining (from round-2)\n")
    verify(campaign.optimize_log)


# ---- the level follows upstream's rule (docs/upstream-loop.md §2) ------------------------
def _patched(patch: Path, tmp_path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(old, new) sources of the files ``patch`` changes, applied to the example."""
    import shutil
    import subprocess

    from runner.flow.new_campaign import EXAMPLES_DIR

    tree = tmp_path / patch.stem
    shutil.copytree(EXAMPLES_DIR / "turbo_kernels", tree / "turbo_kernels")
    files = [ln[6:] for ln in patch.read_text().splitlines() if ln.startswith("+++ b/")]
    old = {f: (tree / f).read_text() for f in files}
    subprocess.run(["git", "apply", str(patch)], cwd=tree, check=True)
    return old, {f: (tree / f).read_text() for f in files}


def test_the_audit_names_a_change_of_control_flow_or_layout(tmp_path: Path) -> None:
    """Upstream upgrades "high-risk (control flow, data layout, etc.)" changes to full
    validation: the demo's speed-up adds a conditional expression and a transposed copy;
    the fp64 slow-down changes a constant only; a comment or a renamed name is no risk."""
    from runner.flow.new_campaign import EXAMPLES_DIR
    from runner.judge.confirmation import change_risk

    kernel = "turbo_kernels/pytorch/ops/gemm_fp8.py"
    old, new = _patched(EXAMPLES_DIR / "demo_patches" / "speedup_reuse_fp8_weight.patch", tmp_path)
    assert change_risk(old, new) == [
        f"control flow changes in {kernel} (IfExp)",
        f"data layout changes in {kernel} (contiguous, t)",
    ]
    old, new = _patched(EXAMPLES_DIR / "demo_patches" / "slowdown_fp64_accumulate.patch", tmp_path)
    assert change_risk(old, new) == []
    src = "def f(x, y):\n    if x:\n        return y.t()\n    return y\n"
    renamed = "def f(x, w):  # a comment\n    if x:\n        return w.t()\n    return w\n"
    assert change_risk({"k.py": src}, {"k.py": renamed}) == []
    loop = src.replace("    if x:\n", "    for _ in range(2):\n        pass\n    if x:\n")
    assert change_risk({"k.py": src}, {"k.py": loop}) == ["control flow changes in k.py (For)"]
    assert change_risk({"k.py": src}, {"k.py": "def f(:"}) == [
        "k.py does not parse on one side: its control flow is unknown"
    ]
    assert change_risk({"k.cu": "a"}, {"k.cu": "b"}) == []  # Python sources only


def test_a_quick_acceptance_is_confirmed_when_borderline_or_risky() -> None:
    from runner.judge.confirmation import BORDERLINE_PCT, confirmation_due

    quick, full = ["a", "b", "probe-r2-1x2x3"], ["a", "b", "c"]
    due = confirmation_due("quick", 2.0, [], quick, full)
    assert due.due and due.adds_shapes == ("c",) and "borderline" in due.summary()
    assert not confirmation_due("quick", BORDERLINE_PCT, [], quick, full).why  # 5% is not
    risky = confirmation_due("quick", 12.0, ["control flow changes in k.py (If)"], quick, full)
    assert risky.due and risky.summary() == "high-risk: control flow changes in k.py (If)"
    # every target measured at the quick level already: its verdict is the full one
    assert not confirmation_due("quick", 2.0, [], ["a", "b", "c"], full).due
    assert not confirmation_due("full", 2.0, ["x"], quick, full).why  # never twice


# ---- stagnation beyond rollbacks: parameter jitter ---------------------------------------
def test_three_rounds_of_parameter_jitter_call_for_a_stagnation_review(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Upstream's "recent rounds only show parameter jitter with no structurally new
    hypotheses" triggers a stagnation review (not a stop), whatever the rollbacks: three
    rounds that each change only numeric literals (tile sizes, warps, stages)."""
    from runner.flow.new_campaign import EXAMPLES_DIR
    from runner.render.stagnation import parameter_only

    tile = (EXAMPLES_DIR / "gpu_patches" / "small_m_tile.patch").read_text()
    assert parameter_only(tile)
    assert not parameter_only((EXAMPLES_DIR / "gpu_patches" / "scalar_scale.patch").read_text())
    assert not parameter_only(tile.replace('+    "BLOCK_M": 64,', '+    "BLOCK_N": 64,'))
    nothing = "--- a/k.py\n+++ b/k.py\n@@ -1 +1 @@\n-x = 1  \n+x = 1\n"
    assert not parameter_only(nothing)  # nothing changed
    # as `git format-patch` writes it: a mail header above, a "-- " signature below
    mailed = f"From 0 Mon Sep 17 00:00:00 2001\nSubject: [PATCH] tiles\n---\n{tile}-- \n2.43.0\n"
    assert parameter_only(mailed)
    campaign = tiny_campaign(tmp_path, "term", baseline=False)
    statuses = [Status.BASELINE, Status.ACCEPTED, Status.ACCEPTED, Status.ROLLED_BACK]
    for n, status in enumerate(statuses, start=1):
        campaign.snapshot_dir(n).mkdir(parents=True)
        if n >= 2:
            patch = tile.replace('+    "BLOCK_M": 64,', f'+    "BLOCK_M": {2 ** (4 + n)},')
            (campaign.round_dir(n) / "candidate.patch").write_text(patch)
        close_round(campaign, _round(n, status))
    code, out = run_cli(["--campaigns-root", str(campaign.root.parent), "status"], capsys)
    assert code == 0, out
    assert "rollbacks in a row: 1\n" in out or "rollbacks in a row: 1 " in out, out
    review = "stagnation review due (not a stop): parameter jitter: rounds 2-4 each changed"
    assert review in out, out


KERNEL = """import triton.language as tl


def kernel(x_ptr, out_ptr, n):
    offs = tl.arange(0, 128)
    x = tl.load(x_ptr + offs)
    tl.store(out_ptr + offs, x)
"""


def _diff(*added: str, removed: str = "    x = tl.load(x_ptr + offs)") -> str:
    body = "".join(f"+{line}\n" for line in added)
    return (
        f"diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -5,3 +5,{2 + len(added)} @@\n"
        f"     offs = tl.arange(0, 128)\n-{removed}\n{body}     tl.store(out_ptr + offs, x)\n"
    )


def test_a_rolled_back_change_again_up_to_comments_whitespace_and_new_names_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rule 7 past the bytes: a change that runs a rolled-back round's code again, only
    its comments, blank lines, line breaks and the names it introduces differing, is a
    second draw of the same experiment and refused; changing what the code does (a name
    the file holds, a literal, a Python block's structure) is a new change."""
    from runner.judge.resubmission import names_in

    campaign = _campaign(tmp_path, [Status.BASELINE, Status.ROLLED_BACK])
    rolled_back = _diff("    y = tl.load(x_ptr + offs, cache_modifier='.cg')", "    x = y * 2")
    (campaign.round_dir(2) / "candidate.patch").write_text(rolled_back)

    def known(path: str) -> set[str]:
        assert path == "k.py"
        return names_in(KERNEL)

    again = _diff(
        "    # stream x past L1: it is read once",
        "    loaded = tl.load(",
        "        x_ptr + offs,  # the tile",
        "        cache_modifier='.cg'",
        "    )",
        "",
        "    x = loaded*2",
    )
    with pytest.raises(RepeatedHypothesis, match=r"round-2's rolled-back code again") as info:
        check_new(campaign, "a new idea", again, known)
    assert (info.value.earlier, info.value.same) == (2, "code")
    # --resubmit measures it again, naming the round whose code it runs (its verdict is
    # judged against the false-accept budget's rest: tests/test_false_accept.py); the
    # same bytes stay refused, and a new change is refused as no resubmission
    assert check_new(campaign, "a new idea", again, known, resubmit=True) == 2
    with pytest.raises(RepeatedHypothesis, match="byte for byte"):
        check_new(campaign, "a new idea", rolled_back, known, resubmit=True)
    new_changes = {
        "another call of the file's": _diff(
            "    y = tl.store(x_ptr + offs, cache_modifier='.cg')", "    x = y * 2"
        ),
        "another literal": _diff(
            "    y = tl.load(x_ptr + offs, cache_modifier='.ca')", "    x = y * 2"
        ),
        "another block structure": _diff(
            "    y = tl.load(x_ptr + offs, cache_modifier='.cg')", "    if n:", "        x = y * 2"
        ),
    }
    for what, patch in new_changes.items():
        assert check_new(campaign, f"a new idea: {what}", patch, known) is None
        with pytest.raises(ConfigError, match="runs no rolled-back round's code: it is a new"):
            check_new(campaign, f"a new idea: {what}", patch, known, resubmit=True)
    # the same shape with every name unknown (no head file) is still refused
    with pytest.raises(RepeatedHypothesis, match=r"round-2's rolled-back"):
        check_new(campaign, "a new idea", again)
    # an A/A round (a comment only) may be measured again after a rolled-back one
    aa = "diff --git a/k.py b/k.py\n--- a/k.py\n+++ b/k.py\n@@ -7,0 +8 @@\n+# A/A {}\n"
    (campaign.round_dir(2) / "candidate.patch").write_text(aa.format(1))
    check_new(campaign, "A/A 2", aa.format(2), known)
    # a tournament's entry is held to the same rule: the whole tournament is refused
    # before anything is written, naming the entry
    from runner.executors.local import LocalExecutor
    from runner.flow.validate import validate
    from runner.round.result import Request
    from runner.store.lineage import Lineage
    from runner.store.manifest import branch_name

    m = campaign.manifest
    lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
    lineage.start(lineage.resolve("HEAD"))  # the baseline's lineage, without measuring it
    (campaign.round_dir(2) / "candidate.patch").write_text(rolled_back)
    entries = [
        Request(3, "a new idea: another literal", new_changes["another literal"]),
        Request(4, "a new idea", again),
    ]
    with pytest.raises(RepeatedHypothesis, match=r"tournament entry round-4: .*round-2's") as info:
        validate(campaign, LocalExecutor(), entries, progress=lambda _m: None)
    assert (info.value.earlier, info.value.same) == (2, "code")
    assert not campaign.round_dir(3).exists() and not campaign.round_dir(4).exists()
    # --resubmit measures one change again: a tournament given it is refused, unmeasured
    files = [tmp_path / "entry-3.patch", tmp_path / "entry-4.patch"]
    for path, entry in zip(files, entries, strict=True):
        path.write_text(entry.patch or "", encoding="utf-8")
    argv = ["--campaigns-root", str(campaign.root.parent), "validate", "--round", "3"]
    for path, entry in zip(files, entries, strict=True):
        argv += ["--hypothesis", entry.hypothesis, "--patch", str(path)]
    code, out = run_cli([*argv, "--resubmit"], capsys)
    assert code == 2 and "a tournament takes new changes only" in out, out
    assert not campaign.round_dir(3).exists() and not campaign.round_dir(4).exists()
