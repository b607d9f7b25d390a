"""Bad input is refused with exit 2 and what to do, before anything is measured or
written: arguments that are not UTF-8, names too long for the filesystem, bounds of
``campaign set`` and of the commands' numbers."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from campaign_helpers import committed_repo, run_cli

from runner.core.errors import MeasurementFailed, PatchRefused
from runner.flow.new_campaign import fresh_example_copy
from runner.judge.vetoes import audit_candidate
from runner.store.lineage import Lineage

# "naïve" typed in a latin-1 terminal: Python keeps the byte 0xEF as a lone surrogate
NAIVE = b"na\xefve".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--round", "2", "--hypothesis", NAIVE, "--patch", "x.patch"],
        ["correct", "--text", NAIVE],
        ["set", "sigma_g", "0.05", "--reason", NAIVE],
        ["tip", "--round", "1", "--text", NAIVE],
    ],
)
def test_an_argument_that_is_not_utf8_is_refused_before_anything_runs(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "campaigns"
    code, out = run_cli(["--campaigns-root", str(root), *argv], capsys)
    assert code == 2, out
    assert "not UTF-8" in out and "LANG=C.UTF-8" in out and "Traceback" not in out
    assert not root.exists()


def test_a_name_too_long_for_the_filesystem_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = committed_repo(tmp_path / "src")
    root = tmp_path / "campaigns"
    argv = ["--campaigns-root", str(root), "init", "--op", "gemm", "--source", str(source)]
    code, out = run_cli([*argv, "--name", "a" * 300], capsys)
    assert code == 2 and "give a shorter name" in out, out


def _latin1_patch(source: Path) -> str:
    """A ``git diff --binary`` that leaves a kernel source latin-1 (not UTF-8); its NUL
    makes git write it as a binary patch (ASCII), as a latin-1 editor's save can."""
    kernel = next(p for p in sorted(source.rglob("*.py")) if "turbo_kernels" in p.parts)
    kernel.write_bytes(kernel.read_bytes() + "# na\u00efve\0\n".encode("latin-1"))
    diff = subprocess.run(
        ["git", "diff", "--binary"], cwd=source, capture_output=True, check=True
    ).stdout
    assert b"GIT binary patch" in diff
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=source, check=True)
    return diff.decode("utf-8", "surrogateescape")


def test_a_patch_that_leaves_a_source_not_utf8_is_refused_before_the_round(
    tmp_path: Path,
) -> None:
    source = fresh_example_copy(tmp_path / "src")
    lineage = Lineage(source, "c", None)
    lineage.start(lineage.resolve("HEAD"))
    patch = _latin1_patch(source)
    with pytest.raises(PatchRefused, match="not UTF-8"):
        lineage.check_patch(patch)
    # the audit itself, given such a tree, fails the round (closed FAILED), not a traceback
    (tmp_path / "inc").mkdir()
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "k.py").write_bytes("x = 'na\u00efve'\n".encode("latin-1"))
    with pytest.raises(MeasurementFailed, match="not UTF-8"):
        audit_candidate("", ["k.py"], tmp_path / "inc", cand, "general")
