"""Bad input is refused with exit 2 and what to do, before anything is measured or
written: arguments that are not UTF-8, names too long for the filesystem, bounds of
``campaign set`` and of the commands' numbers."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign_helpers import committed_repo, run_cli

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
