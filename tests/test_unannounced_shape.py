"""docs/reliability.md §7 row 21: a change tuned to the shapes the campaign lists shows its loss in
``validate``, not only at ``accept``.

The planted cheat: a real fast path (the slow base's waste removed) and, for every GEMM
whose (M, N, K) is not one of the campaign's listed shapes (its targets and, the
stronger variant, its held-out shapes too), a slow loop (eight more forward GEMMs).
Quick rounds measure only representative shapes, all listed, so the cheat read as a
clean gain and was ACCEPTED.  Now a quick round also measures its unannounced shape
(``runner.judge.probe``: a representative shape with another M, written nowhere before
the round), judged by the held-out rule: the **unannounced-shape guard** rolls it back.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import speedup_patch

from runner.compare.loop import ROUND_CAP_ENV
from runner.compare.shapes import all_shapes, level_shapes, round_probe
from runner.core.outcomes import Status
from runner.core.shapes import shape_set
from runner.executors.local import LocalExecutor
from runner.flow.validate import Request, validate_round
from runner.judge.probe import GUARD, PROBE_PREFIX
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.sealed import heldout_labels

OPS = "turbo_kernels/pytorch/ops/gemm_fp8.py"
AT = "        a_mk, b_nk = as_mk_nk(a, b, trans_a, trans_b)\n"


def _cheat(campaign: Campaign, root: Path) -> str:
    """The honest speed-up, plus a slow loop for every GEMM the manifest does not list
    (targets and held-out shapes)."""
    m = campaign.manifest
    names = {*(s.label for s in all_shapes(m)), *heldout_labels(campaign.root, m)}
    listed = sorted({(s.m, s.n, s.k) for s in shape_set(m.shape_set) if s.label in names})
    slow = (
        AT
        + f"        if (a_mk.shape[0], b_nk.shape[0], a_mk.shape[1]) not in {listed!r}:\n"
        + "            for _ in range(8):  # not a listed shape: the slow loop\n"
        + "                _fp8_gemm(a_mk, float8_dtype(config.forward_format, a.device), b_nk,\n"
        + "                          float8_dtype(config.forward_format, a.device), config,\n"
        + "                          out_dtype)\n"
    )
    lineage = Lineage(Path(m.source), campaign.name, None)
    with lineage.worktree(lineage.head(), speedup_patch(root)) as tree:
        text = (tree / OPS).read_text(encoding="utf-8")
        assert text.count(AT) == 1
        (tree / OPS).write_text(text.replace(AT, slow), encoding="utf-8")
        diff = subprocess.run(
            ["git", "diff", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        )
    return diff.stdout


def test_the_probe_is_listed_nowhere_and_rotates(slow_tiny: Path) -> None:
    m = Campaign.load(slow_tiny / "campaigns" / "t").manifest
    known = {(s.m, s.n, s.k) for s in shape_set(m.shape_set)}
    probes = [round_probe(m, "quick", n) for n in range(2, 8)]
    assert all(p is not None and p.label.startswith(PROBE_PREFIX) for p in probes)
    assert not {(p.m, p.n, p.k) for p in probes if p} & known
    assert len({p.label for p in probes if p}) == len(probes)
    assert round_probe(m, "full", 3) is None and round_probe(m, "quick", 1) is None
    assert level_shapes(m, "quick", 3)[-1] == probes[1]  # measured by round 3's quick level
    assert all(not p.label.startswith(PROBE_PREFIX) for p in level_shapes(m, "quick"))


@pytest.mark.integration
def test_a_change_tuned_to_the_listed_shapes_is_rolled_back_by_validate(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ROUND_CAP_ENV, "1")  # the loss is many times the noise: first pairs final
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    n = campaign.next_round()
    probe = round_probe(campaign.manifest, "quick", n)
    assert probe is not None
    patch = _cheat(campaign, slow_tiny)
    result = validate_round(
        campaign,
        LocalExecutor(),
        Request(n, "fast path for the listed shapes", patch),
        progress=lambda _m: None,
    )
    reasons = "\n".join(result.reasons)
    assert result.status is Status.ROLLED_BACK, reasons
    assert GUARD in reasons and probe.label in reasons, reasons
