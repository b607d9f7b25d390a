"""``python -m runner.worker.fullbench``: the example target's recorded benchmark command runs.

Real subprocesses in a fresh git copy of the example package, on the CPU (TORCH
backend), with tiny shape sets and a short timing budget.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from runner.core.csv_schema import get_schema
from runner.core.shapes import shape_set
from runner.flow.new_campaign import fresh_example_copy
from runner.targets.registry import get_target
from runner.worker.ops.base import load_adapter

REPO = Path(__file__).resolve().parent.parent
FAST = ["--device", "cpu", "--budget-s", "0.05"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return fresh_example_copy(tmp_path_factory.mktemp("fullbench") / "src")


def run(
    source: Path, args: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "PYTHONPATH": f"{source}{os.pathsep}{REPO}", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", "runner.worker.fullbench", *args],
        cwd=source,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_prints_and_writes_the_pinned_csv(source: Path, tmp_path: Path) -> None:
    out = tmp_path / "q.csv"
    proc = run(
        source,
        [
            "--op",
            "quantize",
            "--granularity",
            "rowwise",
            "--shape-set",
            "quant-tiny",
            "--out",
            str(out),
            *FAST,
        ],
        {"TURBO_KERNELS_QUANTIZE_BACKEND": "TORCH"},
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    sys.path.insert(0, str(source))
    try:
        import turbo_kernels

        schema = get_schema(load_adapter("quantize", turbo_kernels, {}).info.schema)
    finally:
        sys.path.remove(str(source))
    assert lines[0] == schema.header
    labels = [s.label for s in shape_set("quant-tiny")]
    assert [ln.split(",")[0] for ln in lines[1:]] == labels
    check = schema.columns.index("Check")
    assert {ln.split(",")[check] for ln in lines[1:]} == {"PASS"}
    assert out.read_text(encoding="utf-8") == proc.stdout


def test_the_example_targets_recorded_command_runs(source: Path) -> None:
    """The command written into every summary.md of an example campaign is real."""
    command = get_target("example").benchmark_command("gemm", None, "TORCH")
    assert "runner.worker.fullbench" in command
    var, _, rest = command.partition(" ")
    name, _, value = var.partition("=")
    argv = shlex.split(rest)
    assert argv[:3] == ["python", "-m", "runner.worker.fullbench"]
    proc = run(source, [*argv[3:], "--shape-set", "tiny", *FAST], {name: value})
    assert proc.returncode == 0, proc.stderr
    assert len(proc.stdout.splitlines()) == 1 + len(shape_set("tiny"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--op", "gemm", "--shape-set", "tiny", "--shapes", "no-such-shape"], "no-such-shape"),
        (["--op", "quantize", "--shape-set", "quant-tiny"], "needs --granularity"),
        (["--op", "gemm", "--shape-set", "nope"], "unknown shape set"),
    ],
)
def test_bad_input_is_refused_with_what_to_do(source: Path, args: list[str], message: str) -> None:
    proc = run(source, [*args, *FAST])
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stdout == ""
