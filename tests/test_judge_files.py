"""docs/reliability.md §7 row 2: the judge is the incumbent's.  A change outside kernel_source and
the target's build files is refused before measuring unless declared
(``--allow-outside``), the focused test is the lineage head's, and the kernel snapshot
holds every file an accepted change touched."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
from campaign_helpers import run_cli

from runner.core.errors import ConfigError
from runner.core.outcomes import Status
from runner.round.judge_files import check_scope, judge_paths, restore_judge
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage, patch_paths
from runner.targets.example import EXAMPLE
from runner.targets.primus_turbo import PRIMUS_TURBO
from runner.worker.bench.focused_test import judge_changes

KERNEL = "turbo_kernels/cpu/gemm_fp8.py"
TEST = "tests/test_example_gemm_fp8.py"
HOLLOW_TEST = "def test_blockwise():\n    assert True\n"


def _M() -> SimpleNamespace:
    return SimpleNamespace(
        kernel_source=[KERNEL, "csrc/kernels/"],
        test_command=f"python -m pytest {TEST}::test_x -q -p no:cacheprovider -k blockwise",
    )


def test_a_change_outside_the_kernel_scope_is_refused_naming_the_files() -> None:
    m = _M()
    with pytest.raises(ConfigError) as info:
        check_scope(m, EXAMPLE, [KERNEL, "README.md", TEST], ())  # type: ignore[arg-type]
    msg = str(info.value)
    assert "README.md, tests/test_example_gemm_fp8.py" in msg
    assert "--allow-outside README.md --allow-outside tests/test_example_gemm_fp8.py" in msg
    assert "nothing was measured" in msg
    got = check_scope(m, EXAMPLE, [KERNEL, "README.md"], ("README.md",))  # type: ignore[arg-type]
    assert got == ["README.md"]
    assert check_scope(m, EXAMPLE, [KERNEL, "csrc/kernels/a.cu"], ()) == []  # type: ignore[arg-type]
    assert check_scope(m, PRIMUS_TURBO, ["setup.py"], ()) == []  # type: ignore[arg-type]


def test_the_candidate_tree_gets_the_incumbents_judge_files(tmp_path: Path) -> None:
    inc, cand = tmp_path / "inc", tmp_path / "cand"
    for tree, body in (
        (inc, "def test_blockwise():\n    assert gemm() == 1\n"),
        (cand, HOLLOW_TEST),
    ):
        (tree / "tests").mkdir(parents=True)
        (tree / TEST).write_text(body)
        (tree / "tests" / "helper.py").write_text(f"# {tree.name}\n")
    (cand / "tests" / "conftest.py").write_text("import pytest  # added by the candidate\n")
    touched = [TEST, "tests/helper.py", "tests/conftest.py", KERNEL]
    m = _M()
    assert "conftest.py" in judge_paths(m, inc, touched)  # type: ignore[arg-type]
    restored = restore_judge(m, inc, cand, touched)  # type: ignore[arg-type]
    assert restored == ["tests/conftest.py", "tests/helper.py", TEST]
    assert (cand / TEST).read_text() == (inc / TEST).read_text()
    assert not (cand / "tests" / "conftest.py").exists()
    assert restore_judge(m, inc, cand, touched) == []  # type: ignore[arg-type]


def _hostile_patch(campaign: Campaign) -> str:
    """At the lineage head: a kernel that doubles its output, the focused test hollowed
    to ``assert True``, and a README line."""
    lineage = Lineage(Path(campaign.manifest.source), campaign.name, None)
    with lineage.worktree(lineage.head()) as tree:
        kernel = tree / KERNEL
        text = kernel.read_text(encoding="utf-8")
        assert text.count("    return acc.to(out_dtype)\n") == 1
        kernel.write_text(
            text.replace("    return acc.to(out_dtype)\n", "    return (2 * acc).to(out_dtype)\n")
        )
        (tree / TEST).write_text(HOLLOW_TEST, encoding="utf-8")
        with (tree / "README.md").open("a", encoding="utf-8") as f:
            f.write("\nfaster now\n")
        diff = subprocess.run(["git", "diff"], cwd=tree, capture_output=True, text=True, check=True)
    return diff.stdout


@pytest.mark.integration
def test_a_hollowed_focused_test_judges_nothing(
    demo_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = Campaign.load(demo_copy)
    patch = _hostile_patch(camp)
    assert sorted(patch_paths(patch)) == ["README.md", TEST, KERNEL]
    patch_file = tmp_path / "hostile.patch"
    patch_file.write_text(patch, encoding="utf-8")
    n = camp.next_round()
    root = ["--campaigns-root", str(demo_copy.parent)]
    argv = [*root, "validate", "--round", str(n), "--hypothesis", "h", "--patch", str(patch_file)]
    code, out = run_cli(argv, capsys)
    assert code == 2 and "README.md" in out and "--allow-outside" in out, out
    assert not camp.round_dir(n).exists()
    code, out = run_cli([*argv, "--allow-outside", "README.md"], capsys)
    assert code == 2 and TEST in out and not camp.round_dir(n).exists(), out
    # declared: the round runs, with the incumbent's test, which sees the doubled output
    code, out = run_cli([*argv, "--allow-outside", "README.md", "--allow-outside", TEST], capsys)
    # a correctness FAIL: failed attempt 1 of round n, not a round (Rule 6, exit 3)
    assert code == 3 and f"failed attempt 1 of round {n}" in out, out
    assert Campaign.load(demo_copy).next_round() == n
    attempt = camp.round_dir(n) / "attempts" / "attempt-1"
    reasons = json.loads((attempt / "attempt.json").read_text(encoding="utf-8"))["why"]
    assert "focused test failed on the candidate" in reasons
    assert "declared outside kernel_source (--allow-outside): README.md, " + TEST in reasons
    assert f"the candidate's {TEST} replaced by the incumbent's" in reasons
    # the broken candidate's kernel facts are kept with the attempt and shown
    facts = json.loads((attempt / "attempt.json").read_text(encoding="utf-8"))["kernel_facts"]
    assert set(facts["roles"]) == {"incumbent", "candidate"}, facts
    assert "kernel facts (gfx942" in out
    # the attempt's snapshot holds every file the change touched
    snap = attempt / "kernel_snapshot"
    assert (snap / "README.md").is_file() and (snap / TEST).read_text() == HOLLOW_TEST


@pytest.mark.integration
def test_the_demos_accepted_change_is_in_scope_and_in_its_snapshot(demo_campaign: Path) -> None:
    """The demo's rounds (round-3 its accepted speed-up, which changes the op) touch only
    kernel_source, and each round's snapshot holds every file its change touched
    (whatever the verdict on a loaded machine)."""
    camp = Campaign.load(demo_campaign)
    rounds = [r.round for r in camp.results() if r.status is not Status.BASELINE]
    assert rounds
    for n in rounds:
        touched = patch_paths((camp.round_dir(n) / "candidate.patch").read_text("utf-8"))
        assert set(touched) <= set(camp.manifest.kernel_source), touched
        for path in touched:
            assert (camp.snapshot_dir(n) / path).is_file(), path
    assert "turbo_kernels/pytorch/ops/gemm_fp8.py" in touched  # round-3, the speed-up


def test_the_worker_names_a_judge_file_rewritten_added_or_replaced(tmp_path: Path) -> None:
    """``judge_changes``: what the worker checks before the focused test (row 19): a
    rewritten file, a file where the head has none (a conftest.py a build added), and a
    link or folder in a file's place are named; the head's bytes pass."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_k.py").write_text("def test_k():\n    assert 1\n", encoding="utf-8")
    head = hashlib.sha256((tests / "test_k.py").read_bytes()).hexdigest()
    expect = {"tests/test_k.py": head, "tests/conftest.py": "", "pytest.ini": ""}
    assert judge_changes(expect, tmp_path) == []
    (tests / "conftest.py").write_text("collect_ignore = ['test_k.py']\n", encoding="utf-8")
    (tmp_path / "pytest.ini").mkdir()
    assert judge_changes(expect, tmp_path) == ["pytest.ini", "tests/conftest.py"]
    (tests / "conftest.py").unlink()
    (tmp_path / "pytest.ini").rmdir()
    (tests / "test_k.py").write_text("def test_k():\n    pass\n", encoding="utf-8")
    assert judge_changes(expect, tmp_path) == ["tests/test_k.py"]
    (tests / "test_k.py").unlink()
    (tests / "test_k.py").symlink_to(tmp_path / "elsewhere.py")
    assert judge_changes(expect, tmp_path) == ["tests/test_k.py"]
