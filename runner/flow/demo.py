"""``make demo``: a whole campaign on a fresh git copy of the bundled example package.

Baseline, then one hypothesis that really slows the code down (ROLLED BACK) and one
that really speeds it up (ACCEPTED), each a real patch measured paired against the
lineage head in fresh processes.  The slow-down is edited into the checkout, as a user
edits the kernel, and validated without a patch file: its rollback puts the checkout
back to the lineage head and keeps the edit (docs/protocol.md §6.7).  Ends by printing
``campaign: <path>``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from runner.core.outcomes import RoundResult
from runner.core.processes import run
from runner.core.timestamps import name_stamp
from runner.executors.local import LocalExecutor
from runner.flow.baseline import run_baseline
from runner.flow.new_campaign import (
    EXAMPLES_DIR,
    CampaignFields,
    create_campaign,
    fresh_example_copy,
)
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name

PATCHES = EXAMPLES_DIR / "demo_patches"
SLOWDOWN = (
    "slowdown_fp64_accumulate.patch",
    "K1",
    "Accumulating the per-block partial products in float64 buys precision we do not "
    "need and should cost about 2x on the CPU (expected: slower, rolled back).",
)
SPEEDUP = (
    "speedup_reuse_fp8_weight.patch",
    "K4",
    "The backward pass quantises the weight to FP8 a second time although 128x128 block "
    "scales do not depend on the reduction direction; reusing the forward's FP8 weight "
    "(save_for_backward, bucket K4) removes one weight quantisation per step (expected: "
    "faster).",
)


def demo_manifest_fields(source: Path, stamp: str, device: str) -> CampaignFields:
    gpu = "cpu" if device == "cpu" else "sm90"
    return CampaignFields(
        target="example",
        source=str(source),
        target_op="gemm_fp8",
        granularity="blockwise",
        target_backend="TORCH" if device == "cpu" else "TRITON",
        target_gpu=gpu,
        campaign_name=f"gemm_fp8_blockwise_demo_{gpu}_{stamp}",
        timing={
            "repeats": 3,
            "warmup_s": 0.1,
            "batch_s": 0.03,
            "max_repeats": 8,
            "budget_s": 0.4,
            "target_rsd": 0.01,
        },
        max_iterations=10,
    )


def run_demo(
    root: Path, say: Callable[[str], None] = print, *, device: str = "cpu", passes: int = 3
) -> tuple[Campaign, list[RoundResult]]:
    stamp = name_stamp().replace("-", "_")
    source = fresh_example_copy(root / "sources" / f"demo-{stamp}")
    say(f"demo: fresh git copy of the example package at {source}")
    campaign = create_campaign(root, demo_manifest_fields(source, stamp, device))
    executor = LocalExecutor()
    results = [run_baseline(campaign, executor, passes=passes, progress=say)]
    campaign = Campaign.load(campaign.root)
    for n, (patch, bucket, hypothesis) in enumerate((SLOWDOWN, SPEEDUP), start=2):
        text: str | None = (PATCHES / patch).read_text(encoding="utf-8")
        if n == 2:  # the user's edit in the checkout
            run(["git", "apply", "-"], cwd=source, input_text=text)
            text = None
        results.append(
            validate_round(
                campaign, executor, Request(n, hypothesis, text, bucket=bucket), progress=say
            )
        )
        campaign = Campaign.load(campaign.root)
    _checkout_at_head(campaign, source, say)
    return campaign, results


def _checkout_at_head(campaign: Campaign, source: Path, say: Callable[[str], None]) -> None:
    """The demo's checkout moved to the lineage head (the optimisation branch, which
    holds the accepted round), so the next edit starts from the accepted kernel and a
    round from it does not undo the accepted one."""
    m = campaign.manifest
    branch = branch_name(m) if m.git_commit else None
    lineage = Lineage(source, campaign.name, branch)
    head = lineage.head()
    lineage.git("checkout", "-q", *([branch] if branch else ["--detach", head]))
    say(f"demo: checkout {source} is at the lineage head {head[:12]} ({branch or 'detached'})")
