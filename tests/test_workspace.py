"""Workspace mode against real git repositories: extract, record, sync back."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.core.errors import ConfigError
from runner.store.workspace import (
    check_scaffolding,
    extract_workspace,
    load_record,
    suite_command,
    sync_back,
    workspace_command,
)

pytestmark = pytest.mark.integration

KERNEL = "primus_turbo/triton/gemm/gemm_fp8_kernel.py"
TEST = "tests/pytorch/ops/test_gemm_fp8.py"
BENCH = "benchmark/ops/training/bench_gemm_turbo.py"


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture
def upstream(tmp_path: Path) -> Path:
    repo = tmp_path / "upstream"
    for rel, text in {KERNEL: "BLOCK = 128\n", TEST: "def test(): pass\n", BENCH: "pass\n"}.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    return repo


@pytest.fixture
def workspace(upstream: Path, tmp_path: Path) -> Path:
    dest = tmp_path / "campaign"
    extract_workspace(upstream, [KERNEL], dest, tests=[TEST], bench=[BENCH])
    return dest


def test_extract_copies_and_records(upstream: Path, workspace: Path) -> None:
    assert (workspace / "src" / KERNEL).read_text() == "BLOCK = 128\n"
    assert (workspace / "tests" / TEST).is_file()
    assert (workspace / "bench" / BENCH).is_file()
    record = yaml.safe_load((workspace / "src" / "UPSTREAM.yaml").read_text())
    assert record == {
        "schema_version": 1,
        "upstream": str(upstream.resolve()),
        "commit": git(upstream, "rev-parse", "HEAD"),
        "files": [{"path": KERNEL, "sha256": hashlib.sha256(b"BLOCK = 128\n").hexdigest()}],
        "tests": [{"path": TEST, "sha256": hashlib.sha256(b"def test(): pass\n").hexdigest()}],
        "bench": [{"path": BENCH, "sha256": hashlib.sha256(b"pass\n").hexdigest()}],
    }


def test_sync_back_copies_only_core_kernel_files(upstream: Path, workspace: Path) -> None:
    (workspace / "src" / KERNEL).write_text("BLOCK = 256\n")
    (workspace / "tests" / TEST).write_text("def test(): assert 0\n")
    (workspace / "src" / "helper_scaffold.py").write_text("x = 1\n")
    assert sync_back(workspace, upstream) == [KERNEL]
    assert (upstream / KERNEL).read_text() == "BLOCK = 256\n"
    assert git(upstream, "status", "--porcelain") == f"M {KERNEL}"
    assert sync_back(workspace, upstream) == []  # already in sync


def test_sync_back_refuses_scaffolding(upstream: Path, workspace: Path) -> None:
    with pytest.raises(ConfigError, match="only core kernel files"):
        sync_back(workspace, upstream, only=[KERNEL, TEST])
    with pytest.raises(ConfigError, match="scaffolding"):
        check_scaffolding(workspace, ["bench/" + BENCH])
    record_path = workspace / "src" / "UPSTREAM.yaml"
    record = yaml.safe_load(record_path.read_text())
    record["files"].append(record["tests"][0])
    record_path.write_text(yaml.safe_dump(record))
    with pytest.raises(ConfigError, match="both as kernel and as test"):
        sync_back(workspace, upstream)
    assert git(upstream, "status", "--porcelain") == ""


def test_sync_back_refuses_an_upstream_that_moved(upstream: Path, workspace: Path) -> None:
    (upstream / KERNEL).write_text("BLOCK = 64\n")
    (workspace / "src" / KERNEL).write_text("BLOCK = 256\n")
    with pytest.raises(ConfigError, match="changed upstream"):
        sync_back(workspace, upstream)
    assert (upstream / KERNEL).read_text() == "BLOCK = 64\n"


@pytest.mark.parametrize("bad", ["../etc/passwd", "/etc/passwd", "missing.py"])
def test_extract_rejects_bad_paths(upstream: Path, tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError):
        extract_workspace(upstream, [bad], tmp_path / "ws")


def test_extract_needs_git_and_refuses_twice(
    upstream: Path, workspace: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError, match="already extracted"):
        extract_workspace(upstream, [KERNEL], workspace)
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "k.py").write_text("")
    with pytest.raises(ConfigError, match="not a git checkout"):
        extract_workspace(plain, ["k.py"], tmp_path / "ws2")


def test_record_version_is_checked(workspace: Path) -> None:
    path = workspace / "src" / "UPSTREAM.yaml"
    path.write_text(path.read_text().replace("schema_version: 1", "schema_version: 9"))
    with pytest.raises(ConfigError, match="re-extract"):
        load_record(workspace)


def test_upstream_commands_find_the_copied_files_and_their_folders(
    upstream: Path, workspace: Path
) -> None:
    """Upstream's commands as they run in the workspace: a copied file's path and a
    folder that holds one are moved under ``tests/``/``bench/`` once; the full suite
    (``pytest tests/pytorch/ -v``, the folder upstream names) collects the copied test
    there, and in upstream's own tree the command is left as it is."""
    test = f"python -m pytest {TEST} -q -k blockwise"
    bench = f"python {BENCH} --output out/upstream_benchmark.csv"
    assert (
        workspace_command(test, [TEST], [BENCH]) == f"python -m pytest tests/{TEST} -q -k blockwise"
    )
    assert workspace_command(bench, [TEST], [BENCH]) == (
        f"python bench/{BENCH} --output out/upstream_benchmark.csv"
    )
    suite = suite_command("pytest tests/pytorch/ -v", workspace)
    assert suite == "pytest tests/tests/pytorch/ -v"
    assert suite_command("pytest tests/pytorch/ -v", upstream) == "pytest tests/pytorch/ -v"
    ran = subprocess.run(
        [sys.executable, "-m", *suite.split()[:-1], "-q", "-p", "no:cacheprovider"],
        cwd=workspace,
        capture_output=True,
        text=True,
    )
    assert ran.returncode == 0 and "1 passed" in ran.stdout, ran.stdout + ran.stderr
