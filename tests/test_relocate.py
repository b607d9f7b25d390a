"""docs/reliability.md §7 row 11: a campaign folder copied with ``cp -r`` keeps the original's
absolute ``source:``; it is refused (exit 2, naming ``campaign relocate``) before it
runs git anywhere, and ``campaign relocate --source PATH`` points it at its own
checkout as a recorded change."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import run_cli

from runner.store.appendlog import verify
from runner.store.campaign import Campaign

pytestmark = pytest.mark.integration  # a copy of the real demo campaign


def _refs(repo: Path) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), "for-each-ref"], capture_output=True, text=True, check=True
    ).stdout


def _clone(source: Path, dest: Path, *, lineage: bool) -> Path:
    subprocess.run(["git", "clone", "-q", str(source), str(dest)], check=True)
    if lineage:
        subprocess.run(
            [
                "git",
                "-C",
                str(dest),
                "fetch",
                "-q",
                str(source),
                "+refs/campaigns/*:refs/campaigns/*",
            ],
            check=True,
        )
    return dest


def test_a_copied_folder_is_refused_until_relocated(
    demo_copy: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    original = Campaign.load(demo_copy)
    source = Path(original.manifest.source)
    refs = _refs(source)
    copy = tmp_path / "elsewhere" / demo_copy.name
    shutil.copytree(demo_copy, copy)  # what `cp -r` does: the manifest is unchanged
    root = ["--campaigns-root", str(copy.parent)]
    patch = tmp_path / "h.patch"
    patch.write_text("diff --git a/x b/x\n", encoding="utf-8")
    for argv in (
        ["report"],
        ["validate", "--round", "4", "--hypothesis", "h", "--patch", str(patch)],
    ):
        code, out = run_cli([*root, *argv], capsys)
        assert code == 2, out
        assert f"was written for {demo_copy}" in out and "campaign relocate" in out
    assert _refs(source) == refs and not (copy / "report").exists()

    bare = _clone(source, tmp_path / "no-lineage", lineage=False)
    code, out = run_cli([*root, "relocate", "--source", str(bare)], capsys)
    assert code == 2 and "refs/campaigns/*" in out, out

    log = (copy / "logs" / "optimize.md").read_bytes()
    clone = _clone(source, tmp_path / "clone", lineage=True)
    code, out = run_cli([*root, "relocate", "--source", str(clone)], capsys)
    assert code == 0, out
    moved = Campaign.load(copy)
    assert moved.manifest.source == str(clone.resolve())
    assert moved.manifest.campaign_dir == str(copy)
    grown = moved.optimize_log.read_bytes()
    assert grown.startswith(log) and b"relocated: campaign folder" in grown[len(log) :]
    verify(moved.optimize_log)
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "chain integrity: OK" in out, out
    code, out = run_cli([*root, "report"], capsys)
    assert code == 0, out
    assert _refs(source) == refs  # the original's repository was never touched
    assert Campaign.load(demo_copy).manifest.source == str(source)
