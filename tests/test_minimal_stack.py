"""Workspace mode on Primus-Turbo (docs/primus-turbo.md): a Triton kernel's minimal stack
carries the kernel and its import path unchanged and stands in (visibly) only where
that path reaches the compiled extension or a package the stack does not carry; rounds
build nothing; HIP/CK kernels are refused with the way to run them.

The fixture ``tests/data/pt_triton_stack`` has upstream's layout and import
statements (checked at a6a16cdc), with plain-Python "kernels": no torch, no GPU."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from runner.core.errors import ConfigError
from runner.flow.new_campaign import CampaignFields, create_campaign
from runner.store.minimal_stack import STAND_IN_MARK
from runner.targets.registry import manifest_target

FIXTURE = Path(__file__).parent / "data" / "pt_triton_stack"
KERNEL = "primus_turbo/triton/gemm/gemm_fp8_kernel.py"
FIELDS = {
    "target": "primus-turbo",
    "target_op": "gemm_fp8",
    "granularity": "blockwise",
    "target_gpu": "sm90",
    "execution_mode": "workspace",
    "target_shapes": ["Llama-2-7B-qkv-mb1-4096x12288x4096"],
    "heldout": False,
}


def checkout(tmp_path: Path) -> Path:
    repo = tmp_path / "Primus-Turbo"
    shutil.copytree(FIXTURE, repo)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*git, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*git, "-C", str(repo), "commit", "-qm", "upstream"], check=True)
    return repo


def run_in(ws: Path, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ws / "src"), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ws, env=env, capture_output=True, text=True
    )


def test_triton_workspace_carries_the_kernel_and_stands_in(tmp_path: Path) -> None:
    repo = checkout(tmp_path)
    campaign = create_campaign(
        tmp_path / "c", CampaignFields(source=str(repo), target_backend="TRITON", **FIELDS)
    )
    m = campaign.manifest
    ws = Path(m.source)
    assert (ws / "src" / KERNEL).read_bytes() == (repo / KERNEL).read_bytes()
    assert m.kernel_source == [f"src/{KERNEL}"]
    record = yaml.safe_load((ws / "src" / "UPSTREAM.yaml").read_text())
    stand_ins = set(record["stand_ins"])
    assert {
        "primus_turbo/pytorch/_C.py",
        "primus_turbo/flydsl/gemm/gemm_fp8_kernel.py",
    } <= stand_ins
    for rel in stand_ins:
        assert STAND_IN_MARK in (ws / "src" / rel).read_text()
    # what the kernel's path never reaches is not carried
    assert not (ws / "src" / "primus_turbo/pytorch/ops/attention.py").exists()
    assert not (ws / "src" / "primus_turbo/pytorch/deep_ep").exists()
    assert "from .attention" not in (ws / "src/primus_turbo/pytorch/ops/__init__.py").read_text()
    # the worker's imports work from the stack; a stand-in says what it is when called
    ok = run_in(
        ws,
        "import primus_turbo.pytorch.ops as o; print(o.gemm_fp8([[1, 2]], [[3, 4]], trans_b=True))",
    )
    assert ok.returncode == 0 and ok.stdout.strip() == "[[11]]", ok.stderr
    code = (
        "import os; os.environ['PRIMUS_TURBO_GEMM_BACKEND'] = 'FLYDSL'\n"
        "import primus_turbo.pytorch.ops as o; o.gemm_fp8([[1]], [[1]])"
    )
    stood = run_in(ws, code)
    assert stood.returncode != 0 and "is a stand-in" in stood.stderr
    # the focused test runs in the workspace, moved under tests/
    assert "tests/tests/pytorch/ops/test_gemm_fp8.py" in m.test_command
    focused = "['-q', '-p', 'no:cacheprovider', 'tests/tests/pytorch/ops/test_gemm_fp8.py']"
    test = run_in(ws, f"import pytest; raise SystemExit(pytest.main({focused}))")
    assert test.returncode == 0, test.stdout + test.stderr
    # rounds build nothing and run locally; the integration gate uses the full target
    assert m.executor == "local" and not manifest_target(m).editable_install
    assert record["target"] == "primus-turbo"


@pytest.mark.parametrize("backend", ["CK"])
def test_hip_ck_workspace_is_refused_with_the_way(tmp_path: Path, backend: str) -> None:
    repo = checkout(tmp_path)
    (repo / "csrc/kernels/gemm/ck").mkdir(parents=True)
    for rel in (
        "csrc/kernels/gemm/ck_gemm.cu",
        "csrc/kernels/gemm/ck/x.h",
        "csrc/pytorch/gemm/ck_gemm.cpp",
    ):
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text("// fixture\n")
    subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
    subprocess.run(
        [
            "git",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-C",
            str(repo),
            "commit",
            "-qm",
            "ck",
        ],
        check=True,
    )
    with pytest.raises(ConfigError) as err:
        create_campaign(
            tmp_path / "c", CampaignFields(source=str(repo), target_backend=backend, **FIELDS)
        )
    text = str(err.value)
    assert "primus_turbo.pytorch._C" in text and "csrc/kernels/gemm/ck_gemm.cu" in text
    assert "--mode repo" in text and "--backend TRITON" in text
