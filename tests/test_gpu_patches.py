"""The GPU hypotheses in ``examples/gpu_patches`` stay usable as the kernels change.

Each patch must apply to the example package as it is now, and after any of the others
was accepted before it (rounds advance the head), and the patched blockwise FP8 kernel
must still compile for sm90, gfx942 and gfx950 (the package's own ahead-of-time compile
test, run in the patched copy).  Real git repositories and real subprocesses.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

import runner
from runner.flow.new_campaign import EXAMPLES_DIR, fresh_example_copy

HARNESS_ROOT = Path(runner.__file__).resolve().parent.parent

PATCH_DIR = EXAMPLES_DIR / "gpu_patches"
PATCHES = sorted(p.name for p in PATCH_DIR.glob("*.patch"))


def git(tree: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", *args], cwd=tree, capture_output=True, text=True, check=False, timeout=60
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_example_copy(tmp_path_factory.mktemp("gpu-patches") / "src")


def reset(tree: Path) -> None:
    assert git(tree, "checkout", "-q", "--", ".").returncode == 0


def test_there_are_three_hypotheses_with_a_readme() -> None:
    assert len(PATCHES) >= 3
    readme = (PATCH_DIR / "README.md").read_text(encoding="utf-8")
    assert all(f"`{name}`" in readme for name in PATCHES)


@pytest.mark.parametrize("order", list(itertools.permutations(PATCHES)), ids="+".join)
def test_every_patch_applies_after_any_other(tree: Path, order: tuple[str, ...]) -> None:
    reset(tree)
    try:
        for name in order:
            proc = git(tree, "apply", str(PATCH_DIR / name))
            assert proc.returncode == 0, f"{name} after {order}: {proc.stderr}"
        assert git(tree, "diff", "--quiet").returncode == 1  # something changed
    finally:
        reset(tree)


@pytest.mark.parametrize("applied", [*([p] for p in PATCHES), PATCHES], ids="+".join)
def test_patched_kernel_compiles_for_every_target(tree: Path, applied: list[str]) -> None:
    pytest.importorskip("triton")
    reset(tree)
    try:
        for name in applied:
            assert git(tree, "apply", str(PATCH_DIR / name)).returncode == 0
        # this checkout's runner after the tree, not whichever one is installed (a
        # worktree may share a virtualenv with another checkout's editable install)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(HARNESS_ROOT)])}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                "-W",
                "error",
                "tests/test_triton_compile.py",
                "-k",
                "blockwise or mxfp8",
            ],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            check=False,
            timeout=600,
        )
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
        assert " passed" in proc.stdout and "failed" not in proc.stdout
    finally:
        reset(tree)
