"""The minimal stack's platform layer: on a campaign declared for an NVIDIA GPU the
stack (never the kernel) makes upstream's two AMD-only choices take gfx950's path
(OCP FP8; no AMD-only Triton launch options), and UPSTREAM.yaml, the rounds and the
report say it is a non-AMD run; on ROCm nothing is added.

The campaigns use the fixture of tests/test_minimal_stack.py (upstream's layout and
imports, checked at a6a16cdc); the shim's halves run here on the CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from runner.flow.new_campaign import CampaignFields, create_campaign
from runner.flow.workspace_mode import platform_stack
from runner.store import cuda_platform_shim as shim
from runner.store.stack_platform import INIT, PLATFORM_MARK, SHIM, platform_line
from runner.targets.registry import get_target
from tests.test_minimal_stack import FIELDS, KERNEL, checkout, run_in


@pytest.mark.parametrize("gpu", ["sm90", "gfx942"])
def test_layer_is_in_the_stack_on_cuda_only_and_the_kernel_is_upstreams(
    tmp_path: Path, gpu: str
) -> None:
    repo = checkout(tmp_path)
    fields: dict[str, Any] = {**FIELDS, "target_gpu": gpu}
    campaign = create_campaign(
        tmp_path / "c", CampaignFields(source=str(repo), target_backend="TRITON", **fields)
    )
    ws = Path(campaign.manifest.source)
    assert (ws / "src" / KERNEL).read_bytes() == (repo / KERNEL).read_bytes()
    record = yaml.safe_load((ws / "src" / "UPSTREAM.yaml").read_text())
    # upstream's training benchmark runs in the workspace, with what it reads beside it
    bench = "benchmark/ops/training"
    for name in ("bench_gemm_turbo.py", "config.py", "batch_size_config.json"):
        assert (ws / "bench" / bench / name).read_bytes() == (repo / bench / name).read_bytes()
    assert f"python bench/{bench}/bench_gemm_turbo.py" in campaign.manifest.benchmark_command
    init = (ws / "src" / INIT).read_text()
    if gpu.startswith("gfx"):
        assert "platform" not in record and not (ws / "src" / SHIM).exists()
        assert PLATFORM_MARK not in init and platform_line(ws) is None
        return
    layer = record["platform"]
    assert layer["amd"] is False and layer["name"] == "cuda" and layer["files"] == [SHIM, INIT]
    assert KERNEL not in layer["files"] and all(e["path"] != INIT for e in record["support"])
    assert (ws / "src" / SHIM).read_text().endswith(Path(shim.__file__).read_text())
    assert init.startswith(f"# {PLATFORM_MARK}") and "import _turbo_campaign_platform" in init
    assert init.endswith((repo / INIT).read_text())
    line = platform_line(ws)
    assert line and "non-AMD run" in line and "ocp_fp8" in line
    # the stack still imports (a CPU torch: the layer installs nothing here)
    ok = run_in(ws, "import primus_turbo.pytorch.ops as o; print(o.gemm_fp8([[1]], [[2]]))")
    assert ok.returncode == 0, ok.stderr
    # accept's integration gate on this host: the synced tree's own stack, with the layer
    stack = platform_stack(get_target("primus-turbo"), campaign.manifest, repo, record)
    assert (stack / KERNEL).read_bytes() == (repo / KERNEL).read_bytes()
    assert (stack / SHIM).is_file() and PLATFORM_MARK in (stack / INIT).read_text()
    focused = "['-q', '-p', 'no:cacheprovider', 'tests/pytorch/ops/test_gemm_fp8.py']"
    env = {**os.environ, "PYTHONPATH": str(stack), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    code = f"import pytest; raise SystemExit(pytest.main({focused}))"
    test = subprocess.run(
        [sys.executable, "-c", code], cwd=stack, env=env, capture_output=True, text=True
    )
    assert test.returncode == 0, test.stdout + test.stderr


def test_ocp_finder_gives_low_precision_gfx950s_formats(tmp_path: Path) -> None:
    core = tmp_path / "primus_turbo" / "pytorch" / "core"
    core.mkdir(parents=True)
    for folder in (core, core.parent, core.parent.parent):
        (folder / "__init__.py").write_text("")
    (core / "low_precision.py").write_text(
        "import torch\n"
        "def check_fp8_ocp_support():\n    return False, 'below (9, 5)'\n"
        "float8_e4m3 = torch.float8_e4m3fnuz if not check_fp8_ocp_support()[0] else None\n"
    )
    code = (
        "import sys, torch\n"
        "from runner.store.cuda_platform_shim import OcpFinder\n"
        "sys.meta_path.insert(0, OcpFinder())\n"
        "from primus_turbo.pytorch.core import low_precision as lp\n"
        "assert lp.float8_e4m3 is torch.float8_e4m3fn, lp.float8_e4m3\n"
        "assert lp.float8_e5m2 is torch.float8_e5m2 and lp.check_fp8_ocp_support()[0]\n"
    )
    root = Path(__file__).resolve().parents[1]
    env = {"PYTHONPATH": f"{tmp_path}:{root}", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


class _Launcher:
    def run(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return kwargs


def test_launch_drops_only_the_amd_only_options_once() -> None:
    shim.patch_launch(_Launcher)
    first = _Launcher.run
    shim.patch_launch(_Launcher)
    assert _Launcher.run is first
    got = _Launcher().run(
        1, grid=(1,), matrix_instr_nonkdim=16, waves_per_eu=0, kpack=1, BLOCK_M=128
    )
    assert got == {"grid": (1,), "BLOCK_M": 128}


class _Tuner:
    def __init__(self, configs: list[Any]) -> None:
        self.configs = configs

    def prune_configs(self, kwargs: dict[str, Any]) -> list[Any]:
        return list(self.configs)


def test_autotune_times_each_config_that_launches_the_same_once() -> None:
    from triton import Config

    def cfg(bm: int, **amd: int) -> Config:
        return Config({"BLOCK_M": bm, "BLOCK_N": 128, **amd}, num_warps=4, num_stages=2)

    # upstream's NN list (a6a16cdc): every config again with matrix_instr_nonkdim=16
    listed = [cfg(128), cfg(256), cfg(128, matrix_instr_nonkdim=16), cfg(256, kpack=2)]
    listed.append(Config({"BLOCK_M": 128, "BLOCK_N": 128}, num_warps=8, num_stages=2))
    shim.patch_prune(_Tuner)
    first = _Tuner.prune_configs
    shim.patch_prune(_Tuner)
    assert _Tuner.prune_configs is first
    timed = _Tuner(listed).prune_configs({})
    assert timed == [listed[0], listed[1], listed[4]]  # the first of each kept, in order


def test_runner_import_installs_nothing() -> None:
    assert not any(isinstance(f, shim.OcpFinder) for f in sys.meta_path)
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    assert not getattr(JITFunction.run, "turbo_campaign_layer", False)
    assert not getattr(Autotuner.prune_configs, "turbo_campaign_layer", False)


def test_round_record_and_report_say_non_amd_run() -> None:
    from dataclasses import replace

    from runner.core.outcomes import RoundResult, Status
    from runner.render.final_report import platform_note
    from tests.test_campaign import result

    line = "non-AMD run: ... [ocp_fp8: ...]"
    base, plain = replace(result(1, Status.BASELINE), platform=line), result(2, Status.ACCEPTED)
    doc = base.to_dict()
    assert doc["platform"] == line and RoundResult.from_dict(doc).platform == line
    assert "platform" not in plain.to_dict()  # a round without the layer is as it was
    note = platform_note([base, plain])
    assert "**Platform: non-AMD run** (rounds 1)" in note and line in note
    assert platform_note([plain]) == ""
