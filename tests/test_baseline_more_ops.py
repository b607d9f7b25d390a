"""A real baseline (two passes, tiny shapes, real worker subprocesses) and a VALIDATE
round for the grouped GEMM, quantize and attention ops on the bundled example package.

Each validate round takes an honest one-line change to the op's CPU implementation
(made in the campaign's source tree, turned into a patch, then undone); the grouped
GEMM campaign also gets a uniform-only shortcut, which the GG-UNIFORM audit rejects.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from campaign_helpers import tiny_campaign

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.csv_io import read_csv
from runner.core.csv_schema import ATTENTION_SCHEMA, GEMM_SCHEMA, MEMORY_SCHEMA
from runner.core.outcomes import RoundResult, Status
from runner.core.shapes import shape_set
from runner.executors.local import LocalExecutor
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.sealed import heldout_labels

pytestmark = pytest.mark.integration

CASES = {
    "grouped_gemm_fp8": ("blockwise", "moe-tiny", GEMM_SCHEMA.header),
    "quantize": ("blockwise", "quant-tiny", MEMORY_SCHEMA.header),
    "attention": (None, "attn-tiny", ATTENTION_SCHEMA.header),
}
GROUPED_FP8 = "turbo_kernels/pytorch/ops/grouped_gemm_fp8.py"
# op -> (file of its CPU (TORCH) implementation, old text, new text): behaviour-neutral
HONEST = {
    "grouped_gemm_fp8": (
        GROUPED_FP8,
        "        start += int(rows)\n",
        "        start = start + int(rows)\n",
    ),
    "quantize": (
        "turbo_kernels/pytorch/kernels/quantization.py",
        "    x_fp8 = scaled.clamp_(-fp8_max, fp8_max).to(dtype)\n",
        "    x_fp8 = scaled.clamp(-fp8_max, fp8_max).to(dtype)\n",
    ),
    "attention": (
        "turbo_kernels/cpu/attention.py",
        "    out = torch.softmax(scores, dim=-1) @ vf\n",
        "    out = scores.softmax(dim=-1) @ vf\n",
    ),
}
# The uniform-layout shortcut: equal-size groups by `torch.split(a, M // G)`.
UNIFORM_OLD = (
    "        for g, lo, hi in _bounds(group_lens):\n"
    "            if hi > lo:\n"
    "                out[lo:hi] = _fp8_gemm(a[lo:hi], fwd, b_nk[g], fwd, config, a.dtype)\n"
)
UNIFORM_NEW = (
    "        for g, a_g in enumerate(torch.split(a, a.shape[0] // len(group_lens))):\n"
    "            lo = g * a_g.shape[0]\n"
    "            out[lo : lo + a_g.shape[0]] = _fp8_gemm(a_g, fwd, b_nk[g], fwd, config, a.dtype)\n"
)


def baseline(root: Path, op: str) -> Campaign:
    granularity, sset, _ = CASES[op]
    return tiny_campaign(root, "t", target_op=op, granularity=granularity, shape_set=sset)


def edit_patch(campaign: Campaign, path: str, old: str, new: str) -> str:
    """The working-tree patch of one edit to ``path`` as the lineage head has it; the
    user's file is put back afterwards."""
    source = Path(campaign.manifest.source)
    lin = Lineage(source, campaign.name, None)
    head_text = subprocess.run(
        ["git", "show", f"{lin.head()}:{path}"],
        cwd=source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert head_text.count(old) == 1, f"{old!r} not once in {path}"
    file = source / path
    original = file.read_text()
    file.write_text(head_text.replace(old, new))
    try:
        return lin.working_tree_patch()
    finally:
        file.write_text(original)


def validate(campaign: Campaign, n: int, hypothesis: str, patch: str) -> RoundResult:
    return validate_round(
        campaign, LocalExecutor(), Request(n, hypothesis, patch), progress=lambda _m: None
    )


def measured_labels(sset: str, heldout: list[str]) -> list[str]:
    """The shape set in its order, less the shape(s) held out at init (never measured
    until accept)."""
    assert heldout, "init holds out one shape by default"
    return [s.label for s in shape_set(sset) if s.label not in heldout]


def assert_closed(campaign: Campaign, result: RoundResult, n: int) -> None:
    assert result.round == n
    assert campaign.closed_rounds()[-1] == n
    assert campaign.summary_path(n).is_file()
    assert json.loads(campaign.result_path(n).read_text())["status"] == result.status.value
    assert f"| round-{n} | {result.status.value} |" in campaign.trend_log.read_text()


@pytest.mark.parametrize("op", list(CASES))
def test_baseline_and_a_validate_round_of_more_ops(
    tmp_path: Path, op: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The rounds change no speed (an honest refactor; a shortcut the audit vetoes): the
    # gate's verdict is not asserted, so their first pairs are final instead of pairs
    # measured up to the suite's cap (conftest WORKER_LIMITS).
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    campaign = baseline(tmp_path, op)
    m = campaign.manifest
    _, sset, header = CASES[op]
    assert m.pinned_header == header
    csv = read_csv(campaign.artifacts_dir(1) / "benchmark.csv", pinned=m.pinned_header)
    assert csv.labels() == measured_labels(sset, heldout_labels(campaign.root, m))
    assert all(r.passed for r in csv.rows)
    assert 3 <= len(m.representative_shapes) <= 5
    if op == "quantize":
        assert all(r.values["Backward GB/s"] == "-" for r in csv.rows)
    if op.startswith("grouped_gemm"):
        by_label = {s.label: s.params["distribution"] for s in shape_set(sset)}
        dists = {by_label[label] for label in m.representative_shapes}
        assert "uniform" in dists and dists - {"uniform"}, dists

    path, old, new = HONEST[op]
    patch = edit_patch(campaign, path, old, new)
    assert new.strip() in patch
    r2 = validate(campaign, 2, f"honest refactor of the {op} CPU path", patch)
    assert r2.status in (Status.ACCEPTED, Status.ROLLED_BACK), r2.reasons
    assert not any("over-fitting audit" in r for r in r2.reasons), r2.reasons
    assert_closed(campaign, r2, 2)
    if not op.startswith("grouped_gemm"):
        return

    shortcut = edit_patch(campaign, GROUPED_FP8, UNIFORM_OLD, UNIFORM_NEW)
    r3 = validate(campaign, 3, "equal-size groups: one torch.split", shortcut)
    assert r3.status is Status.ROLLED_BACK, r3.reasons
    assert_closed(campaign, r3, 3)
    assert any(
        "over-fitting audit: GG-UNIFORM" in r and "assumes a uniform token layout" in r
        for r in r3.reasons
    ), r3.reasons
    assert r3.transfer.decision == "REJECT-as-overfit"
    # the shortcut is also wrong on the skewed layouts: the focused test fails
    assert any(r.startswith("focused test failed on the candidate") for r in r3.reasons)


def test_cli_baseline_of_quantize_makes_its_own_example_copy(tmp_path: Path) -> None:
    """`make baseline OP=quantize`: the CLI with no --source, the op's CPU shape set and
    the default timing (about 50 s on the dev box)."""
    root = tmp_path / "campaigns"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "--campaigns-root",
        str(root),
        "baseline",
        "--op",
        "quantize",
        "--granularity",
        "blockwise",
        "--backend",
        "TORCH",
        "--gpu",
        "cpu",
        "--passes",
        "2",
    ]
    done = subprocess.run(
        cmd,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TMPDIR": str(tmp_path)},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "round-1: BASELINE" in done.stdout
    (campaign_dir,) = [p for p in root.iterdir() if p.name.startswith("quantize_blockwise_torch")]
    campaign = Campaign.load(campaign_dir)
    m = campaign.manifest
    assert m.shape_set == "quant-cpu" and m.pinned_header == MEMORY_SCHEMA.header
    assert Path(m.source).parent == root / "sources"
    assert (Path(m.source) / HONEST["quantize"][0]).is_file()
    csv = read_csv(campaign.artifacts_dir(1) / "benchmark.csv", pinned=m.pinned_header)
    assert csv.labels() == measured_labels("quant-cpu", heldout_labels(campaign.root, m))
    assert all(r.passed for r in csv.rows)
    assert campaign.closed_rounds() == [1]
    assert 3 <= len(m.representative_shapes) <= 5
