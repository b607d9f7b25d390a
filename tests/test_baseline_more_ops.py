"""A real baseline (two passes, tiny shapes, real worker subprocesses) for the grouped
GEMM, quantize and attention ops on the bundled example package."""

from __future__ import annotations

from pathlib import Path

import pytest

from runner.baseline import run_baseline
from runner.campaign import Campaign
from runner.executors.local import LocalExecutor
from runner.newcampaign import create_campaign, fresh_example_copy
from runner.schema import ATTENTION_SCHEMA, GEMM_SCHEMA, MEMORY_SCHEMA, read_csv
from runner.shapes import shape_set

pytestmark = pytest.mark.integration

QUIET = {"repeats": 3, "warmup_s": 0.02, "batch_s": 0.01, "max_repeats": 4, "budget_s": 0.1}
CASES = {
    "grouped_gemm_fp8": ("blockwise", "moe-tiny", GEMM_SCHEMA.header),
    "quantize": ("blockwise", "quant-tiny", MEMORY_SCHEMA.header),
    "attention": (None, "attn-tiny", ATTENTION_SCHEMA.header),
}


def baseline(root: Path, op: str) -> Campaign:
    granularity, sset, _ = CASES[op]
    campaign = create_campaign(
        root / "campaigns",
        target="example",
        source=str(fresh_example_copy(root / "src")),
        target_op=op,
        granularity=granularity,
        target_backend="TORCH",
        target_gpu="cpu",
        shape_set=sset,
        campaign_name="t",
        timing=QUIET,
    )
    run_baseline(campaign, LocalExecutor(), passes=2, progress=lambda _m: None)
    return Campaign.load(campaign.root)


@pytest.mark.parametrize("op", list(CASES))
def test_baseline_of_more_ops(tmp_path: Path, op: str) -> None:
    campaign = baseline(tmp_path, op)
    m = campaign.manifest
    _, sset, header = CASES[op]
    assert m.pinned_header == header
    csv = read_csv(campaign.benchmark_csv(1), pinned=m.pinned_header)
    assert csv.labels() == [s.label for s in shape_set(sset)]
    assert all(r.passed for r in csv.rows)
    assert 3 <= len(m.representative_shapes) <= 5
    if op == "quantize":
        assert all(r.values["Backward GB/s"] == "-" for r in csv.rows)
    if op.startswith("grouped_gemm"):
        by_label = {s.label: s.params["distribution"] for s in shape_set(sset)}
        dists = {by_label[label] for label in m.representative_shapes}
        assert "uniform" in dists and dists - {"uniform"}, dists
