"""docs/reliability.md §7 row 6: a campaign folder that cannot be written (read-only mount, another
user's folder) or a tips root that is a file: exit 2 with what to do, no traceback, and
nothing written.  Tests run as root in CI, where chmod does not stop writes: the lock
path made a directory gives the same OSError a read-only mount does, as root too."""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

import pytest
from campaign_helpers import run_cli

pytestmark = pytest.mark.integration  # a copy of the real demo campaign


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _patch(campaign: Path) -> Path:
    patch = campaign.parent / "h.patch"
    patch.write_text("diff --git a/x b/x\n", encoding="utf-8")
    return patch


def test_a_campaign_whose_lock_cannot_be_taken_is_exit_2(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """report and validate need the campaign lock; when it cannot be opened they stop
    with exit 2 naming the lock and the way out; status still reads (exit 0)."""
    (demo_copy / ".lock").mkdir()  # os.open(O_RDWR) fails as on a read-only mount
    root = ["--campaigns-root", str(demo_copy.parent)]
    before = _snapshot(demo_copy)
    validate = ["validate", "--round", "4", "--hypothesis", "h", "--patch", str(_patch(demo_copy))]
    for argv in (["report"], validate):
        code, err = run_cli([*root, *argv], capsys, stderr_only=True)
        assert code == 2, err
        assert f"cannot take the campaign lock {demo_copy / '.lock'}" in err
        assert "writable" in err and "Traceback" not in err
    assert _snapshot(demo_copy) == before
    code, err = run_cli([*root, "status"], capsys, stderr_only=True)
    assert code == 0, err


def test_tip_into_a_tips_root_that_is_a_file_is_exit_2(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tips = demo_copy.parent / "tips-file"
    tips.write_text("not a folder\n")
    argv = [
        "--campaigns-root",
        str(demo_copy.parent),
        "tip",
        "--round",
        "3",
        "--text",
        "keep the scale reuse",
        "--tips-root",
        str(tips / "below"),
    ]
    code, err = run_cli(argv, capsys, stderr_only=True)
    assert code == 2, err
    assert "cannot write" in err and str(tips) in err and "--tips-root" in err
    assert tips.read_text() == "not a folder\n"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through chmod; see the lock test")
def test_a_read_only_campaign_folder_is_exit_2(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = ["--campaigns-root", str(demo_copy.parent)]
    (demo_copy / ".lock").unlink(missing_ok=True)
    folders = [demo_copy, *[p for p in demo_copy.rglob("*") if p.is_dir()]]
    for folder in folders:
        folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        for argv in (["report"], ["tip", "--round", "3", "--text", "t"]):
            code, err = run_cli([*root, *argv], capsys, stderr_only=True)
            assert code == 2 and "Traceback" not in err, err
    finally:
        for folder in folders:
            folder.chmod(stat.S_IRWXU)
    shutil.rmtree(demo_copy / "report", ignore_errors=True)
