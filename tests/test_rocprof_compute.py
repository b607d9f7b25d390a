"""rocprof-compute before 3.5.0 reports gfx950's HBM bytes wrong: ``campaign profile``
reads the version from the real tool's ``--version`` banner (a recorded sample printed by
a stand-in executable on PATH, run as a subprocess) and says so in ``profile.md``."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from runner.flow import rocprof_compute
from runner.flow.profile import ProfileRun, profile_markdown

DATA = Path(__file__).parent / "data" / "rocprof_compute"


def _install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sample: str) -> None:
    exe = tmp_path / "rocprof-compute"
    exe.write_text(
        f"#!{sys.executable}\nimport sys\n"
        "assert sys.argv[1:] == ['--version'], sys.argv\n"
        f"sys.stdout.write(open({str(DATA / sample)!r}).read())\n"
    )
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")


def test_parse_version_banner() -> None:
    assert rocprof_compute.parse_version((DATA / "version_3.4.0.txt").read_text()) == (3, 4, 0)
    assert rocprof_compute.parse_version("rocprof-compute version: 3.5") == (3, 5, 0)
    assert rocprof_compute.parse_version("usage: rocprof-compute") is None


def test_old_release_on_gfx950_is_flagged_in_profile_md(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, monkeypatch, "version_3.4.0.txt")
    note = rocprof_compute.hbm_note("gfx950", rocprof_compute.version_text())
    assert note is not None and "3.4.0 is older than 3.5.0" in note and "-50%" in note
    got = ProfileRun("rocprofv3", "python bench.py", tmp_path, notes=[note])
    assert "3.4.0 is older than 3.5.0" in profile_markdown(3, got)


def test_fixed_release_and_other_arch_say_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, monkeypatch, "version_3.5.0.txt")
    assert rocprof_compute.hbm_note("gfx950", rocprof_compute.version_text()) is None
    old = (DATA / "version_3.4.0.txt").read_text()
    assert rocprof_compute.hbm_note("gfx942", old) is None


def test_absent_tool_says_the_check_was_not_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    assert rocprof_compute.version_text() is None
    note = rocprof_compute.hbm_note("gfx950", None)
    assert note is not None and "not checked" in note
