"""Tournament rounds (docs/protocol.md §6.8): several hypotheses, consecutive rounds,
one paired measurement against one incumbent, the best accepted one confirmed afresh.

The end-to-end test runs one tournament through the CLI on a copy of the session's
``slow_tiny`` campaign, whose planted waste makes the speed-up far larger than the
noise: the speed-up wins, and each kind of failing entry fails alone.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import git, on_three_shapes, run_cli

from runner.cli.validate_cmd import entry_pairs
from runner.core.errors import ConfigError
from runner.measure.paired import _order
from runner.store.lineage import patch_subject

KERNEL = "turbo_kernels/pytorch/kernels/quantization.py"


# ---- entries -------------------------------------------------------------------------
FORMAT_PATCH = """From 1234567890abcdef1234567890abcdef12345678 Mon Sep 17 00:00:00 2001
From: A Developer <dev@example.com>
Date: Tue, 1 Dec 2026 18:00:00 +0000
Subject: [PATCH 2/3] Reuse the forward's FP8 weight in the backward: one
 quantisation fewer per step

Body text.
---
 x.py | 1 +
diff --git a/x.py b/x.py
"""


def test_a_format_patch_subject_is_its_hypothesis(tmp_path: Path) -> None:
    assert patch_subject(FORMAT_PATCH) == (
        "Reuse the forward's FP8 weight in the backward: one quantisation fewer per step"
    )
    assert patch_subject("diff --git a/x.py b/x.py\n") is None
    mailed, plain = tmp_path / "0001.patch", tmp_path / "plain.patch"
    mailed.write_text(FORMAT_PATCH, encoding="utf-8")
    plain.write_text("diff --git a/x.py b/x.py\n", encoding="utf-8")
    got = entry_pairs((), (mailed,))
    assert got[0][0].startswith("Reuse the forward's FP8 weight")
    assert entry_pairs(("h1", "h2"), (mailed, plain))[1] == ("h2", plain.read_text())
    with pytest.raises(ConfigError, match="no `git format-patch` subject"):
        entry_pairs((), (mailed, plain))
    with pytest.raises(ConfigError, match="1 --hypothesis for 2 --patch"):
        entry_pairs(("h1",), (mailed, plain))
    with pytest.raises(ConfigError, match="one --patch FILE each"):
        entry_pairs(("h1", "h2"), ())


def test_every_candidate_takes_every_position_over_the_pairs() -> None:
    """The balanced order: over k pairs of k candidates each candidate is once in each
    position of the palindrome (the one that follows its own turn included), and the
    incumbent opens and closes every group; two roles keep A B B A."""
    roles = ["incumbent", "c1", "c2", "c3"]
    orders = [_order(roles, p) for p in range(3)]
    for order in orders:
        assert order[0] == order[-1] == 0 and order == tuple(reversed(order))
        assert sorted(order) == [0, 0, 1, 1, 2, 2, 3, 3]
    for slot in (1, 2, 3):
        assert sorted(order[slot] for order in orders) == [1, 2, 3]
    assert _order(["a", "b"], 5) == (0, 1, 1, 0)


# ---- one tournament end to end -------------------------------------------------------
def _patch(source: Path, edit: Callable[[str], str]) -> str:
    """The diff of ``edit`` applied to the kernel file of ``source`` (left unchanged)."""
    path = source / KERNEL
    text = path.read_text(encoding="utf-8")
    path.write_text(edit(text), encoding="utf-8")
    try:
        return git(source, "diff")
    finally:
        path.write_text(text, encoding="utf-8")


def _crash_at_serve(text: str) -> str:
    planted = (
        "import sys\n\nif '--serve' in sys.argv:  # passes its focused test, crashes its worker\n"
        "    raise RuntimeError('planted: this candidate crashes its serving worker')\n"
    )
    return text.replace("import torch\n", "import torch\n" + planted, 1)


@pytest.mark.integration
def test_a_tournament_judges_its_entries_and_failing_ones_fail_alone(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from runner.core.outcomes import Status
    from runner.store.campaign import Campaign
    from runner.store.guard import check_records

    # the A/A is never clear on the tiny shapes' noise: once the speed-up (~1.5x) is
    # accepted at its first pairs, the A/A's interval lies below that reading within a pair
    # or two and it is measured no longer (``outpaced``); the cap (60 s of its share of the
    # time) only bounds a machine too noisy for that
    monkeypatch.setenv("TURBO_CAMPAIGN_ROUND_CAP_S", "60")
    root = copy_campaign(slow_tiny, tmp_path / "c", "t")
    campaign = Campaign.load(root)
    # Three shapes, not four (as tests/test_faults.py): every measurement of the
    # tournament and its confirmation prepares, times and re-checks a quarter fewer, and
    # on the smallest three the slow base's waste is a larger part of a step.
    campaign = on_three_shapes(
        campaign, "test_tournament: the tournament is under test, not the shapes"
    )
    source = Path(campaign.manifest.source)
    head = _head(campaign)
    wrong_scale = ("    return x_fp8, scale_inv\n", "    return x_fp8, scale_inv * 2\n")
    entries = {
        "remove the planted waste": (slow_tiny / "speedup.patch").read_text(encoding="utf-8"),
        "a comment only (A/A)": _patch(source, lambda t: t + "\n# a comment only\n"),
        "double every scale (fails its focused test)": _patch(
            source, lambda t: t.replace(*wrong_scale)
        ),
        "does not apply": "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1 @@\n-nothing\n+x\n",
        "crashes its serving worker": _patch(source, _crash_at_serve),
    }
    # round 2 is open with a failed attempt (Rule 6): the tournament keeps it
    from runner.flow.attempts import record_attempt

    record_attempt(campaign, 2, "an earlier try", entries["a comment only (A/A)"], ["planted"])
    attempt = campaign.round_dir(2) / "attempts" / "attempt-1" / "attempt.json"
    assert attempt.is_file()
    cli = ["--campaigns-root", str(root.parent)]
    argv = [*cli, "validate", "--campaign", "t", "--round", "2", "-q"]
    for k, (hypothesis, text) in enumerate(entries.items()):
        path = tmp_path / f"{k}.patch"
        path.write_text(text, encoding="utf-8")
        argv += ["--hypothesis", hypothesis, "--patch", str(path)]
    code, out = run_cli(argv, capsys)
    assert code == 0, out
    assert "tournament rounds 2-6: round-2 won" in out

    campaign = Campaign.load(root)
    results = [campaign.load_result(n) for n in range(2, 7)]
    assert [r.status for r in results] == [
        Status.ACCEPTED,
        Status.ROLLED_BACK,
        Status.ROLLED_BACK,
        Status.FAILED,
        Status.FAILED,
    ]
    won, aa, wrong, refused, crashed = results
    assert won.commit and _head(campaign) == won.commit
    assert git(source, "rev-parse", f"{won.commit}^").strip() == head  # one commit on the head
    assert any("a fresh paired measurement against the incumbent read" in r for r in won.reasons)
    assert aa.commit is None and aa.gate is not None and aa.gate.pairs_used >= 2
    # the pair counts its reading was judged at, for the false-accept bound
    assert aa.gate.looks and aa.gate.looks[-1] == aa.gate.pairs_used
    # on a loaded machine the A/A may end before round-2's reading is out of its reach:
    # a tiny shape read 5% down (CI at edebb31: -5.96% +- 52.08% on 2 pairs), or its
    # share of the cap spent while its interval still held that reading (CI at 9fa2298:
    # too volatile to tell, +1.24% +- 65.35% on 2 pairs); either way rolled back unmerged
    # (a probe shape's loss is named first, by the unannounced-shape guard: CI at e1a1ff7),
    # or its aggregate read below the noise threshold at 2 pairs (CI at 444a9e2: -5.23%
    # against a threshold of 3.94%): the gate's own roll-back of a loss it believed
    noise = (
        "shape(s) regressed by 5% or more",
        "too volatile to tell",
        "aggregate -",
    )
    noisy = any(r.startswith(noise) for r in aa.reasons)
    if not any(r.startswith("superseded by round-2") for r in aa.reasons) and not noisy:
        # measured no longer once round-2's reading was out of its reach; listed for a retry
        # (noise may also accept the A/A, then superseded)
        assert aa.reasons[0].startswith("stopped at "), aa.reasons
        assert "round-2 was accepted at" in aa.reasons[0], aa.reasons
        assert aa.tournament is not None and aa.tournament.retry == [3]
    assert any("focused test failed" in r for r in wrong.reasons)
    assert "refused before measuring" in refused.reasons[0]
    assert "does not apply" in refused.reasons[0]
    assert "planted: this candidate crashes" in crashed.reasons[0]
    for r in results:  # every entry knows its tournament and its winner
        assert r.tournament is not None and (r.tournament.first, r.tournament.last) == (2, 6)
        assert r.tournament.winner == 2
        assert "## Tournament" in campaign.summary_path(r.round).read_text(encoding="utf-8")
    assert check_records(campaign) == []
    assert attempt.is_file()  # the round's failed attempt, recorded before, is still there
    # each measured round holds its own view of the one measurement, as a single round's
    passes = sorted(p.name for p in (campaign.artifacts_dir(3) / "passes").iterdir())
    assert passes and all(p.endswith(("-incumbent", "-candidate")) for p in passes)
    for r in (aa, wrong):  # each keeps its focused test's log, the failed one's too
        test = campaign.artifacts_dir(r.round) / "passes" / "test-candidate"
        assert (test / "test.log").is_file() and (test / "test.json").is_file(), r.round
    assert (campaign.artifacts_dir(2) / "passes" / "tournament").is_dir()  # beside its confirmation
    saved = json.loads(campaign.result_path(3).read_text(encoding="utf-8"))
    assert saved["tournament"]["line"].startswith("tournament rounds 2-6: round-2 won")

    code, out = run_cli([*cli, "status", "--campaign", "t"], capsys)
    assert code == 0 and "tournament rounds 2-6: round-2 won" in out, out
    assert "consecutive rollbacks: 0" in out  # the entries judged beside the winner


def _head(campaign: object) -> str:
    from runner.store.lineage import Lineage
    from runner.store.manifest import branch_name

    m = campaign.manifest  # type: ignore[attr-defined]
    return Lineage(Path(m.source), m.campaign_name, branch_name(m)).head()


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this host")
def test_a_candidate_whose_native_build_fails_fails_alone(tmp_path: Path) -> None:
    """The Primus-Turbo-shaped fixture's real C extension: the candidate that breaks it
    is dropped with its build log's message, the other ones and the incumbent are built.
    Then the focused tests: the candidate whose own build (its setup.py) hollowed the
    lineage head's restored test files fails alone as TAMPERED, its test not run, and the
    honest candidate's test passes (docs/reliability.md §7 row 19 in a tournament;
    docs/protocol.md §1.5: "a failing entry fails alone")."""
    from test_build_cache import FASTER, HOLLOW, pipeline, tree

    from runner.compare.entries import Entry
    from runner.executors.local import LocalExecutor
    from runner.flow.entry_tests import focused_tests
    from runner.flow.validate import _build
    from runner.round.context import RoundPlan
    from runner.round.judge_files import judge_digests, restore_judge
    from runner.round.result import Request

    campaign = pipeline().new_campaign(tmp_path, "local", None, "cpu")
    repo = Path(campaign.manifest.source)
    broken = {"csrc/kernels/gemm/gemm_config.h": ("SWEEPS 3", "SWEEPS 3 +")}
    hollow = {"setup.py": ("import sys\n", "import sys\n" + HOLLOW)}
    roles = {
        "incumbent": tree(repo, tmp_path / "i"),
        "candidate-1": tree(repo, tmp_path / "c1", broken),
        "candidate-2": tree(repo, tmp_path / "c2", FASTER),
        "candidate-3": tree(repo, tmp_path / "c3", hollow),
    }
    entries = [
        Entry(Request(2, "breaks the build", "x"), 1),
        Entry(Request(3, "faster", "x"), 2),
        Entry(Request(4, "hollows its judge", "x"), 3),
    ]
    for entry, touched in zip(entries, (broken, FASTER, hollow), strict=True):
        entry.tree, entry.touched = roles[entry.role], sorted(touched)
    m = campaign.manifest
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _m: None, tmp_path / "r", 2, "quick")
    rnd.tmp.mkdir()
    for entry in entries:  # what the tournament's _audit does before the builds
        assert entry.tree is not None
        restore_judge(m, roles["incumbent"], entry.tree, entry.touched)
        entry.expect = judge_digests(m, roles["incumbent"], entry.touched)
    with contextlib.ExitStack() as stack:
        built = _build(rnd, stack, roles, entries)
        assert sorted(roles) == ["candidate-2", "candidate-3", "incumbent"]
        assert {b.role for b in built.roles} == {"incumbent", "candidate-2", "candidate-3"}
        assert all(built.plan.builds.get(roles[b.role]) is b for b in built.roles)
        assert not rnd.builds  # the round's own plan is left as it was
        focused_tests(built.plan, entries)
    assert entries[0].failure is not None and "its native build failed" in entries[0].failure
    assert entries[1].failure is None and entries[1].vetoes == []
    why = entries[2].failure
    assert why is not None and why.startswith("TAMPERED") and "candidate-3" in why, why
    assert entries[2].vetoes == []
