"""runner.flow.checkout: the user's checkout after a rolled-back round is the lineage
head's again, the failed edit kept (upstream's Rule 3, docs/protocol.md §6.7).  Real
git repositories of a few files; no round is measured."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from campaign_helpers import git, manifest

from runner.core.errors import ConfigError
from runner.flow.checkout import plan_restore, restore_checkout
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage

KERNEL = "k/kernel.py"


def _repo(root: Path) -> Lineage:
    (root / "k").mkdir(parents=True)
    (root / KERNEL).write_text("ACCUM = 'fp32'\n")
    (root / "notes.txt").write_text("mine\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "base")
    lineage = Lineage(root, "c", None)
    lineage.git("update-ref", lineage.ref, git(root, "rev-parse", "HEAD").strip())
    return lineage


def _edit(lineage: Lineage) -> str:
    (lineage.source / KERNEL).write_text("ACCUM = 'fp64'\n")
    return lineage.working_tree_patch()


def test_a_rollback_restores_the_checkout_and_keeps_the_edit(tmp_path: Path) -> None:
    lineage = _repo(tmp_path / "src")
    patch = _edit(lineage)
    campaign = Campaign(tmp_path / "camp", manifest(source=str(lineage.source)))
    campaign.round_dir(2).mkdir(parents=True)
    (campaign.round_dir(2) / "candidate.patch").write_text(patch)
    assert plan_restore(lineage, patch, from_checkout=True, restore=True)
    line = restore_checkout(campaign, lineage, 2, patch, [KERNEL])
    assert (lineage.source / KERNEL).read_text() == "ACCUM = 'fp32'\n"
    assert git(lineage.source, "status", "--porcelain") == ""
    ref = "refs/campaigns/c/rolled-back/round-2"
    assert ref in line and str(campaign.round_dir(2) / "candidate.patch") in line
    assert "fp64" in git(lineage.source, "show", f"{ref}:{KERNEL}")
    command = line.split("bring it back with: ")[1]
    subprocess.run(command, shell=True, check=True)
    assert (lineage.source / KERNEL).read_text() == "ACCUM = 'fp64'\n"


def test_a_checkout_with_other_edits_is_refused_up_front(tmp_path: Path) -> None:
    lineage = _repo(tmp_path / "src")
    given = _edit(lineage)
    git(lineage.source, "checkout", "-q", "--", KERNEL)
    assert not plan_restore(lineage, given, from_checkout=False, restore=True)  # clean
    _edit(lineage)
    assert plan_restore(lineage, given, from_checkout=False, restore=True)  # the same edit
    (lineage.source / "notes.txt").write_text("mine, edited\n")
    with pytest.raises(ConfigError, match=r"not this round's change.*--keep-checkout"):
        plan_restore(lineage, given, from_checkout=False, restore=True)
    assert not plan_restore(lineage, given, from_checkout=False, restore=False)
    assert (lineage.source / "notes.txt").read_text() == "mine, edited\n"


def test_a_checkout_edited_while_the_round_ran_is_left_alone(tmp_path: Path) -> None:
    lineage = _repo(tmp_path / "src")
    patch = _edit(lineage)
    campaign = Campaign(tmp_path / "camp", manifest(source=str(lineage.source)))
    (lineage.source / KERNEL).write_text("ACCUM = 'bf16'\n")
    line = restore_checkout(campaign, lineage, 2, patch, [KERNEL])
    assert line.startswith("the checkout changed while round-2 ran: left as it is")
    assert (lineage.source / KERNEL).read_text() == "ACCUM = 'bf16'\n"
