"""A focused test that cannot import the package shows the first real cause."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner.core.processes import run
from runner.judge.import_cause import explain_failure, first_import_cause

pytestmark = pytest.mark.integration  # a real pytest subprocess

# A package laid out like Primus-Turbo whose compiled extension was never built, and a
# conftest that, like upstream's, falls back to another import when the first fails.
FILES = {
    "fakept/__init__.py": "",
    "fakept/pytorch/__init__.py": "import fakept.pytorch._C  # noqa: F401\n",
    "fakept/jax/__init__.py": "import fakept_jax_dependency  # noqa: F401\n",
    "tests/conftest.py": (
        "def pytest_collection_modifyitems(config, items):\n"
        "    try:\n"
        "        import fakept.pytorch  # noqa: F401\n"
        "    except ImportError:\n"
        "        import fakept.jax  # noqa: F401\n"
    ),
    "tests/pytorch/ops/test_gemm_fp8.py": "def test_gemm_fp8():\n    pass\n",
}


def test_the_first_import_error_heads_the_message(tmp_path: Path) -> None:
    for rel, text in FILES.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    proc = run(
        [sys.executable, "-m", "pytest", "tests/pytorch/ops/test_gemm_fp8.py", "-q",
         "-p", "no:cacheprovider"],
        cwd=tmp_path, check=False, env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )  # fmt: skip
    assert proc.returncode != 0
    log = proc.stdout
    tail = log[-1500:]
    assert "No module named 'fakept_jax_dependency'" in tail
    assert "fakept.pytorch._C" not in tail  # the tail alone hides the real cause
    shown = explain_failure(tail, log)
    first = shown.splitlines()[0]
    assert first.startswith("first cause: ModuleNotFoundError: No module named 'fakept.pytorch._C'")
    assert "later error: ModuleNotFoundError: No module named 'fakept_jax_dependency'" in first


def test_no_import_error_leaves_the_tail_alone() -> None:
    assert first_import_cause("E   AssertionError: 1 != 2\n") is None
    assert explain_failure("tail", "E   AssertionError\n") == "tail"
    one = "E   ImportError: cannot import name 'x' from 'y'\n"
    assert (
        explain_failure(one, one)
        == f"first cause: ImportError: cannot import name 'x' from 'y'\n{one}"
    )
