"""Workspace mode end to end on the example package: init extracts, rounds run in the
workspace, accept syncs back into the full repository and runs its focused test."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from campaign_helpers import QUIET, SLOW_KERNEL, plant_slow_base

from runner.core.errors import ConfigError
from runner.core.outcomes import Status
from runner.executors.local import LocalExecutor
from runner.flow.accept import run_acceptance
from runner.flow.baseline import run_baseline
from runner.flow.demo import demo_manifest_fields
from runner.flow.new_campaign import CampaignFields, create_campaign, fresh_example_copy
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign

pytestmark = pytest.mark.integration  # real git, real worker subprocesses

# four of the five tiny shapes (the representative shapes need three besides a held-out;
# the suite's session campaigns measure the same set); the accepted round removes the
# slow base's waste (campaign_helpers.plant_slow_base: every FP8 weight quantised three
# times), far more than the timing noise
SHAPES = ["tiny-16x688x512", "tiny-32x1376x512", "tiny-48x1376x512", "tiny-64x1376x512"]
KERNELS = [
    "turbo_kernels/cpu/gemm_fp8.py",
    "turbo_kernels/pytorch/ops/gemm_fp8.py",
    SLOW_KERNEL,
]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
    ).stdout.strip()


def in_workspace(patch: str) -> str:
    """An upstream patch with its paths as they lie in the workspace (under src/)."""
    for side in ("a/", "b/"):
        patch = patch.replace(f" {side}turbo_kernels/", f" {side}src/turbo_kernels/")
    return patch


def test_workspace_mode_end_to_end(tmp_path: Path) -> None:
    upstream = fresh_example_copy(tmp_path / "upstream")
    speedup = plant_slow_base(upstream)
    upstream_head = git(upstream, "rev-parse", "HEAD")
    root = tmp_path / "campaigns"
    fields = replace(demo_manifest_fields(upstream, "ws", "cpu"), timing=QUIET, shape_set="tiny")
    campaign = create_campaign(
        root,
        replace(
            fields, execution_mode="workspace", kernel_source=list(KERNELS), target_shapes=SHAPES
        ),
    )
    m = campaign.manifest
    ws = root.resolve() / "workspaces" / m.campaign_name
    assert Path(m.source) == ws and m.base_commit == git(ws, "rev-parse", "HEAD")
    assert m.kernel_source == [f"src/{k}" for k in KERNELS]
    assert m.test_command.startswith("python -m pytest tests/tests/test_example_gemm_fp8.py")
    record = yaml.safe_load((ws / "src" / "UPSTREAM.yaml").read_text())
    assert record["commit"] == upstream_head
    assert record["commands"]["test_command"].startswith(
        "python -m pytest tests/test_example_gemm_fp8.py"
    )
    assert (ws / "tests" / "tests" / "conftest.py").is_file()
    assert (ws / "src" / "turbo_kernels" / "__init__.py").is_file()  # support: it imports

    executor = LocalExecutor()
    run_baseline(campaign, executor, passes=2, progress=lambda _: None)
    campaign = Campaign.load(campaign.root)
    result = validate_round(
        campaign,
        executor,
        Request(2, "quantise the FP8 weight once", in_workspace(speedup)),
        progress=lambda _: None,
    )
    assert result.status is Status.ACCEPTED, result
    # the rounds ran in the workspace: the upstream checkout is untouched so far
    assert git(upstream, "rev-parse", "HEAD") == upstream_head
    assert git(upstream, "status", "--porcelain") == ""
    assert result.commit and git(ws, "log", "-1", "--format=%s", result.commit).startswith(
        "[optimize] "
    )

    acceptance = run_acceptance(
        Campaign.load(campaign.root), executor, passes=1, progress=lambda _: None
    )
    gate = next(c for c in acceptance.checks if c.name == "integration (full repository)")
    assert gate.ok, gate.detail
    assert "synced 1 file(s), no build" in gate.detail
    branch = f"{m.campaign_name}-integrated"
    if acceptance.accepted:
        assert f"on branch {branch}" in gate.detail
        changed = git(upstream, "diff", "--name-only", upstream_head, branch)
        assert changed == SLOW_KERNEL
    assert git(upstream, "status", "--porcelain") == ""  # synced in a worktree, not here
    assert (campaign.root / "acceptance" / "artifacts" / "integration.log").is_file()


def test_integration_gate_fails_on_the_upstream_focused_test(tmp_path: Path) -> None:
    """A kernel that breaks the upstream test fails the gate (a real pytest run)."""
    from runner.flow.workspace_mode import integration_gate
    from runner.round.context import RoundPlan

    upstream = fresh_example_copy(tmp_path / "upstream")
    fields = demo_manifest_fields(upstream, "bad", "cpu")
    campaign = create_campaign(tmp_path / "c", replace(fields, execution_mode="workspace"))
    ws = Path(campaign.manifest.source)
    kernel = ws / campaign.manifest.kernel_source[0]
    kernel.write_text(kernel.read_text() + "\nraise ImportError('broken kernel')\n")
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _: None, tmp_path / "tmp", 0, "full")
    ok, detail, commit = integration_gate(rnd, ws, tmp_path / "integration.log")
    assert not ok and commit is None
    assert "upstream focused test failed" in detail and "broken kernel" in detail


def test_workspace_mode_is_refused_for_a_kernel_built_from_the_full_tree(
    tmp_path: Path,
) -> None:
    # a Triton kernel of Primus-Turbo has a minimal stack (tests/test_minimal_stack.py);
    # a compiled one (hipBLASLt here) is refused with the way to run it
    upstream = fresh_example_copy(tmp_path / "upstream")
    with pytest.raises(ConfigError, match="--mode repo"):
        create_campaign(
            tmp_path / "c",
            CampaignFields(
                target="primus-turbo",
                executor="local",
                source=str(upstream),
                target_op="gemm",
                target_backend="HIPBLASLT",
                execution_mode="workspace",
                test_command="pytest t.py",
                benchmark_command="python b.py",
                kernel_source=["turbo_kernels/triton/gemm_kernel.py"],
            ),
        )
