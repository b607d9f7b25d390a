"""A focused test that cannot import the package shows the first real cause."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runner.core.errors import FocusedTestFailed, MeasurementFailed
from runner.core.import_cause import explain_failure, first_import_cause
from runner.core.processes import run

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
        [
            sys.executable,
            "-m",
            "pytest",
            "tests/pytorch/ops/test_gemm_fp8.py",
            "-q",
            "-p",
            "no:cacheprovider",
        ],
        cwd=tmp_path,
        check=False,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
    )
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


def test_a_measurement_failure_ends_with_its_logs_tail(tmp_path: Path) -> None:
    """The one failure of a measurement (core/errors.py) reads the log it names: its
    text is the message, then the tail headed by the first import error."""
    log = tmp_path / "worker.log"
    log.write_text("E   ModuleNotFoundError: No module named 'kern._C'\n" + "x\n" * 2000)
    exc = MeasurementFailed("worker pass-01-incumbent failed (exit 1)", log)
    head, cause, *rest = str(exc).splitlines()
    assert head == exc.message == "worker pass-01-incumbent failed (exit 1)"
    assert cause == "first cause: ModuleNotFoundError: No module named 'kern._C'"
    assert rest and set(rest) == {"x"}  # only the tail, not the whole log
    assert str(MeasurementFailed("no source tree", tmp_path / "missing.log")) == "no source tree"
    veto = FocusedTestFailed("the focused test failed", tail="E   assert 1 == 2")
    assert isinstance(veto, MeasurementFailed) and veto.return_code == 6
    assert veto.tail == "E   assert 1 == 2" and veto.log_path is None
