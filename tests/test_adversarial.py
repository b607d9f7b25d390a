"""Planted cheats (docs/measurement.md §5).

Each test plants one known way of cheating a benchmark harness into the example
package, runs it through ``validate_round`` on a private copy of a small campaign, and
checks that the guard meant for it caught it and that the round's result and
``summary.md`` say why.  The honest speed-up (the slow base's waste removed, about
1.6x) is ACCEPTED and not flagged.

Work on a side stream (GPU only) is covered by
``tests/test_gpu_engine.py::test_side_stream_work_is_timed``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import QUIET, on_three_shapes, speedup_patch, tiny_campaign

from runner.compare.shapes import level_shapes
from runner.core.outcomes import RoundResult, Status
from runner.executors.local import LocalExecutor
from runner.flow.validate import Request, validate_round
from runner.render.status import collect_status, render_status
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.worker.bench import timing

pytestmark = pytest.mark.integration

OPS_FP8 = "turbo_kernels/pytorch/ops/gemm_fp8.py"
CPU_GROUPED = "turbo_kernels/cpu/grouped_gemm.py"
PACKAGE_INIT = "turbo_kernels/__init__.py"


@pytest.fixture(scope="module")
def fp8_base(
    slow_tiny: Path,
    tmp_path_factory: pytest.TempPathFactory,
    copy_campaign: Callable[[Path, Path, str], Path],
) -> Path:
    """A copy of the session's tiny gemm_fp8 campaign (conftest ``slow_tiny``: its base
    quantises the FP8 weight three times; every cheat below is caught by a check, not by
    its speed, and the honest speed-up removes that waste) on its three smallest target
    shapes, all of them representative: the folder ``fp8`` copies."""
    root = tmp_path_factory.mktemp("adv-base") / "base"
    campaign = Campaign.load(copy_campaign(slow_tiny, root, "t"))
    on_three_shapes(campaign, "test_adversarial: the guards are under test, not the shapes")
    return root


@pytest.fixture
def fp8(
    fp8_base: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> Campaign:
    """A private copy of ``fp8_base`` and its source repository."""
    return Campaign.load(copy_campaign(fp8_base, tmp_path / "fp8", "t"))


@pytest.fixture(scope="module")
def grouped(tmp_path_factory: pytest.TempPathFactory) -> Campaign:
    root = tmp_path_factory.mktemp("adv-gg")
    return tiny_campaign(
        root, "adv", target_op="grouped_gemm", granularity=None, shape_set="moe-tiny"
    )


def plant(campaign: Campaign, path: str, edits: list[tuple[str, str]]) -> str:
    """Edit ``path`` in the campaign's source checkout, take the working-tree patch,
    restore the file; return the patch."""
    source = Path(campaign.manifest.source)
    file = source / path
    original = file.read_text(encoding="utf-8")
    text = original
    for old, new in edits:
        assert text.count(old) == 1, f"{old!r} not found once in {path}"
        text = text.replace(old, new)
    file.write_text(text, encoding="utf-8")
    try:
        return Lineage(source, campaign.name, None).working_tree_patch()
    finally:
        file.write_text(original, encoding="utf-8")


def validate(campaign: Campaign, hypothesis: str, patch: str) -> tuple[RoundResult, str]:
    """Run the next round on ``patch``; return its result and summary.md text."""
    lineage = Lineage(Path(campaign.manifest.source), campaign.name, None)
    head = lineage.head()
    n = campaign.next_round()
    result = validate_round(
        campaign,
        LocalExecutor(),
        # the timer patches change the package's __init__: declared outside kernel_source
        Request(n, hypothesis, patch, allow_outside=(PACKAGE_INIT,)),
        progress=lambda _m: None,
    )
    assert result.round == n
    if result.status is not Status.ACCEPTED:
        assert lineage.head() == head, "a rejected round moved the lineage"
    return result, campaign.summary_path(n).read_text(encoding="utf-8")


def audit_vetoes(result: RoundResult) -> list[str]:
    return [r for r in result.reasons if r.startswith("over-fitting audit:")]


# ---------------------------------------------------------------- static audit (W2)

QUANT_IMPORT = "from turbo_kernels.pytorch.ops.gemm import as_mk_nk\n"
QUANT_A = "    a_fp8, a_scale_inv = quantize_fp8(a, a_dtype, gran, bs)\n"


def test_id_keyed_activation_cache_is_vetoed_by_the_audit(fp8: Campaign) -> None:
    patch = plant(
        fp8,
        OPS_FP8,
        [
            (QUANT_IMPORT, QUANT_IMPORT + "\n_QUANT_CACHE: dict = {}\n"),
            (
                QUANT_A,
                "    if id(a) not in _QUANT_CACHE:\n"
                "        _QUANT_CACHE[id(a)] = quantize_fp8(a, a_dtype, gran, bs)\n"
                "    a_fp8, a_scale_inv = _QUANT_CACHE[id(a)]\n",
            ),
        ],
    )
    result, summary = validate(fp8, "memoise the quantised activation", patch)
    assert result.status is Status.ROLLED_BACK
    vetoes = audit_vetoes(result)
    assert vetoes and all(" W2 " in v for v in vetoes), result.reasons
    assert "cache keyed on the identity of activation/grad/scale ['a']" in vetoes[0]
    assert vetoes[0] in summary
    assert result.transfer is not None and result.transfer.decision == "REJECT-as-overfit"
    assert "REJECT-as-overfit" in summary


FORWARD_RETURN = "        return _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)\n"


def test_output_cache_keyed_on_input_identity_is_vetoed_by_the_audit(fp8: Campaign) -> None:
    patch = plant(
        fp8,
        OPS_FP8,
        [
            (QUANT_IMPORT, QUANT_IMPORT + "\n_OUT_CACHE: dict = {}\n"),
            (
                FORWARD_RETURN,
                "        key = (id(a), id(b), a._version)\n"
                "        out = _OUT_CACHE.get(key)\n"
                "        if out is None:\n"
                "            out = _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)\n"
                "            _OUT_CACHE[key] = out\n"
                "        return out\n",
            ),
        ],
    )
    result, summary = validate(fp8, "cache the output per input", patch)
    assert result.status is Status.ROLLED_BACK
    vetoes = audit_vetoes(result)
    assert any(" W2 " in v and "adding _version" in v for v in vetoes), result.reasons
    assert all(v in summary for v in vetoes)
    assert result.transfer is not None and result.transfer.decision == "REJECT-as-overfit"


# ---------------------------------------------------------------- correctness checks

FORWARD_FIRST = "        a_mk, b_nk = as_mk_nk(a, b, trans_a, trans_b)\n"


def test_writing_into_the_input_fails_the_check(fp8: Campaign) -> None:
    # flush near-zero activations in place, through ``.data`` so that autograd's
    # version counter does not notice: idempotent, invisible in the output's SNR
    patch = plant(
        fp8,
        OPS_FP8,
        [(FORWARD_FIRST, "        a.data.masked_fill_(a.abs() < 1e-3, 0.0)\n" + FORWARD_FIRST)],
    )
    result, summary = validate(fp8, "flush tiny activations in place", patch)
    assert result.status is Status.ROLLED_BACK
    assert not audit_vetoes(result), result.reasons
    every = f"Check FAIL in {len(level_shapes(fp8.manifest, 'quick', result.round))} shape(s)"
    check_fail = [r for r in result.reasons if r.startswith(every)]
    assert check_fail and check_fail[0] in summary, result.reasons
    assert "wrote into its input a" in _candidate_logs(fp8, result.round)
    why = [r for r in result.reasons if r.startswith("candidate check: ")]
    assert any("wrote into its input a" in r for r in why), result.reasons
    assert any("wrote into its input a" in r for r in why if r in summary)


STALE_SLOT = (
    "\n\nclass _Slot:\n"
    "    key: object = None\n"
    "    out: torch.Tensor | None = None\n"
    "\n\n_SLOT = _Slot()\n"
)


def test_a_reused_output_buffer_fails_the_reference_check(fp8: Campaign) -> None:
    # one module-level output buffer, filled the first time a (shape, config) is seen
    # and returned (a copy) for every later call of the same kind
    patch = plant(
        fp8,
        OPS_FP8,
        [
            (QUANT_IMPORT, QUANT_IMPORT + STALE_SLOT),
            (
                FORWARD_RETURN,
                "        kind = (tuple(a.shape), tuple(b.shape), trans_a, trans_b, out_dtype,\n"
                "                config.format, config.granularity, config.block_size)\n"
                "        if _SLOT.key != kind or _SLOT.out is None:\n"
                "            _SLOT.key, _SLOT.out = kind, _fp8_gemm(\n"
                "                a_mk, fwd, b_nk, fwd, config, out_dtype\n"
                "            )\n"
                "        return _SLOT.out.clone()\n",
            ),
        ],
    )
    result, summary = validate(fp8, "reuse the output buffer", patch)
    assert result.status is Status.ROLLED_BACK
    assert not audit_vetoes(result), result.reasons
    every = f"Check FAIL in {len(level_shapes(fp8.manifest, 'quick', result.round))} shape(s)"
    check_fail = [r for r in result.reasons if r.startswith(every)]
    assert check_fail and check_fail[0] in summary, result.reasons
    assert "out_snr" in (log := _candidate_logs(fp8, result.round)), log[-2000:]
    assert "below 25 dB" in log
    assert any(r.startswith("candidate check: ") and "below 25 dB" in r for r in result.reasons)


def _candidate_logs(campaign: Campaign, n: int) -> str:
    """The candidate workers' logs stored with the round's artifacts."""
    passes = campaign.artifacts_dir(n) / "passes"
    logs = sorted(passes.glob("pass-*-candidate/worker.log"))
    assert logs, f"no candidate worker log under {passes}"
    return "\n".join(p.read_text(encoding="utf-8") for p in logs)


# ---------------------------------------------------------------- timer patching


def test_a_patched_timer_fails_the_round(fp8: Campaign) -> None:
    # reached without a name the audit reads: the worker's binding guard catches it
    patch = plant(
        fp8,
        PACKAGE_INIT,
        [
            (
                '__version__ = "0.1.0"\n',
                '__version__ = "0.1.0"\n\n_t = __import__("ti" + "me")\n_pt = _t.process_time\n'
                'setattr(_t, "process_" + "time", lambda: _pt() * 0.5)\n',
            )
        ],
    )
    result, summary = validate(fp8, "import-time tuning", patch)
    assert result.status in (Status.FAILED, Status.ROLLED_BACK), result.reasons
    text = "\n".join(result.reasons)
    assert "replaced time.process_time" in text, text
    assert "replaced time.process_time" in summary


def test_a_timer_patched_by_name_is_vetoed_by_the_audit(fp8: Campaign) -> None:
    patch = plant(
        fp8,
        PACKAGE_INIT,
        [
            (
                '__version__ = "0.1.0"\n',
                '__version__ = "0.1.0"\n\nimport time as _t\n\n_pt = _t.process_time\n'
                "_t.process_time = lambda: _pt() * 0.5\n",
            )
        ],
    )
    result, summary = validate(fp8, "import-time tuning", patch)
    assert result.status is Status.ROLLED_BACK
    vetoes = audit_vetoes(result)
    assert any(" HARNESS " in v and "`_t.process_time`" in v for v in vetoes), result.reasons
    assert all(v in summary for v in vetoes)


def test_check_clocks_sees_a_replaced_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    timing.check_clocks()
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    with pytest.raises(timing.ClockTampered, match=r"replaced time\.perf_counter"):
        timing.check_clocks()
    monkeypatch.undo()
    timing.check_clocks()


def test_a_clock_replaced_while_timing_voids_the_timing(monkeypatch: pytest.MonkeyPatch) -> None:
    def sneaky() -> None:
        monkeypatch.setattr(time, "process_time", lambda: 0.0)

    with pytest.raises(timing.ClockTampered):
        timing.measure(sneaky, timing.TimingSettings(**QUIET), "cpu")  # type: ignore[arg-type]


# ---------------------------------------------------------------- grouped GEMM layout

GG_LOOP = (
    "    for g, (lo, hi) in enumerate(_bounds(group_lens)):\n"
    "        if hi > lo:\n"
    "            out[lo:hi] = (a[lo:hi].float() @ b[g].float().t()).to(out_dtype)\n"
    "    return out\n"
)


def test_a_uniform_only_grouped_gemm_is_vetoed(grouped: Campaign) -> None:
    patch = plant(
        grouped,
        CPU_GROUPED,
        [
            (
                GG_LOOP,
                "    groups = b.shape[0]\n"
                "    m_per_group = a.shape[0] // groups\n"
                "    for g, rows in enumerate(torch.split(a, m_per_group)):\n"
                "        lo = g * m_per_group\n"
                "        out[lo : lo + rows.shape[0]] = (rows.float() @ b[g].float().t()).to(\n"
                "            out_dtype\n"
                "        )\n"
                "    return out\n",
            )
        ],
    )
    result, summary = validate(grouped, "one split per expert", patch)
    assert result.status is Status.ROLLED_BACK
    vetoes = audit_vetoes(result)
    assert any(" GG-UNIFORM " in v for v in vetoes), result.reasons
    assert all(v in summary for v in vetoes)


# ---------------------------------------------------------------- honest patches


def test_an_honest_speedup_is_not_flagged(slow_tiny_speedup: Path) -> None:
    """The honest speed-up on the slow base (about 1.6x; no noise of a busy 2-core
    machine turns it) is ACCEPTED, measured paired and interleaved, and no guard flags
    it.  It is also the red-team suite's honest counterpart (tests/test_redteam.py).
    The round is the session's (conftest ``slow_tiny_speedup``), read here."""
    fp8 = Campaign.load(slow_tiny_speedup / "campaigns" / "t")
    result = fp8.load_result(2)
    summary = fp8.summary_path(2).read_text(encoding="utf-8")
    patch = (fp8.round_dir(2) / "candidate.patch").read_text(encoding="utf-8")
    assert result.round == 2 and patch == speedup_patch(slow_tiny_speedup)
    assert result.status is Status.ACCEPTED, result.reasons
    # paired and interleaved: B C C B (a B B C C order would pair drift with the change)
    turns = fp8.artifacts_dir(result.round) / "turns.jsonl"
    lines = [ln for ln in turns.read_text(encoding="utf-8").splitlines() if ln]
    order = [json.loads(line)["worker"].split("-", 2)[2] for line in lines]
    assert order[:4] == ["incumbent", "candidate", "candidate", "incumbent"], order
    assert order.count("incumbent") == order.count("candidate")
    assert not audit_vetoes(result), result.reasons
    assert not any("over-fit" in r for r in result.reasons), result.reasons
    assert result.transfer is not None and result.transfer.decision == "ACCEPT-as-real"
    assert "over-fit" not in summary  # no audit finding, no over-fit transfer note
    # the pair counts the gate looked at, the last the pairs it judged on; and what the
    # round spent of the campaign's false-accept budget (runner.judge.false_accept)
    assert result.gate is not None and result.gate.looks
    assert result.gate.looks[-1] == result.gate.pairs_used
    assert list(result.gate.looks) == sorted(set(result.gate.looks))
    status = collect_status(fp8)
    assert [n for n, _ in status.false_accept.attempts] == [2]
    assert "false-accept budget: " in render_status(status)
