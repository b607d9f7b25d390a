"""The red-team suite: shortcuts that once slipped through, and new ones, each a patch
against the example package (``tests/data/redteam/*.patch``) run as a VALIDATE round
on the CPU demo campaign, asserted not ACCEPTED with the guard that caught it named in
the round's summary; next to them a legitimate weight cache that passes the simulation.
The genuine speed-up that no guard flags (large enough that no timing noise turns it,
asserted ACCEPTED, paired B C C B) is tests/test_adversarial.py's
``test_an_honest_speedup_is_not_flagged``: the same round on the same session campaign
ran in both files.

Keep it growing: every shortcut that once got through stays here.

Every test takes a copy of one module campaign (source repo and campaign folder
together), so each round starts from the same lineage head: the session's ``slow_tiny``
(conftest; every patch here applies on its slow base too) on three target shapes, so
no baseline of its own is measured.  The verdicts do not depend on timing noise: every
catch below is a check (audit, sampled timed outputs, harness bindings, the 8-step
simulation), not a speed comparison.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import on_three_shapes

import runner
from runner.compare.loop import ROUND_CAP_ENV
from runner.core.cgroup import WorkerCgroup
from runner.core.outcomes import RoundResult, Status
from runner.executors.isolation import isolation_works
from runner.executors.local import LocalExecutor
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage

pytestmark = pytest.mark.integration

PATCHES = Path(__file__).parent / "data" / "redteam"
# Patches that look the harness up by a name built from pieces (no audit rule reads it)
# spell its module as it was when they were written, before the worker side moved into
# runner/worker/.  The patch files are kept as recorded, and each round gets the
# shortcut aimed at today's module, so it still reaches the code it targets (a
# rebinding that missed would leave every guard untested and the round would pass).
HARNESS_MOVED = {'"ner.bench."': '"ner.worker.bench."'}


@pytest.fixture(scope="module")
def base(
    slow_tiny: Path,
    tmp_path_factory: pytest.TempPathFactory,
    copy_campaign: Callable[[Path, Path, str], Path],
) -> Path:
    """A copy of ``slow_tiny`` (gemm_fp8 blockwise, its baseline) on its three smallest
    target shapes, all of them representative: the folder ``campaign`` copies."""
    root = tmp_path_factory.mktemp("redteam-base") / "base"
    campaign = Campaign.load(copy_campaign(slow_tiny, root, "t"))
    on_three_shapes(campaign, "test_redteam: the guards are under test, not the shapes")
    return root


@pytest.fixture
def campaign(
    base: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> Campaign:
    """A private copy of the module's campaign and its source repository."""
    return Campaign.load(copy_campaign(base, tmp_path / "rt", "t"))


def run_round(
    campaign: Campaign, name: str, hypothesis: str, bucket: str = "K1"
) -> tuple[RoundResult, str]:
    """Validate ``tests/data/redteam/<name>.patch`` (or a demo patch path) as the next
    round; return the result and its summary.md."""
    path = PATCHES / f"{name}.patch"
    patch = aimed((path if path.exists() else Path(name)).read_text(encoding="utf-8"))
    lineage = Lineage(Path(campaign.manifest.source), campaign.name, None)
    head = lineage.head()
    n = campaign.next_round()
    result = validate_round(
        campaign,
        LocalExecutor(),
        # the harness-clock patches change the package's __init__: declared
        Request(n, hypothesis, patch, bucket=bucket, allow_outside=("turbo_kernels/__init__.py",)),
        progress=lambda _m: None,
    )
    if result.status is not Status.ACCEPTED:
        assert lineage.head() == head, "a rejected round moved the lineage"
    return result, campaign.summary_path(n).read_text(encoding="utf-8")


def aimed(patch: str) -> str:
    """``patch`` with its harness lookups aimed at today's modules (``HARNESS_MOVED``)."""
    for then, now in HARNESS_MOVED.items():
        patch = patch.replace(then, now)
    return patch


def test_every_built_harness_name_in_the_patches_is_a_module() -> None:
    """A shortcut that builds the harness's module name finds that module: a name the
    harness no longer has would make the patch a no-op and its test pass vacuously."""
    built = re.compile(r'"run" \+ "(ner\.[a-z_.]+)" \+ "([a-z_]+)"')
    names = [
        "run" + a + b
        for path in sorted(PATCHES.glob("*.patch"))
        for a, b in built.findall(aimed(path.read_text(encoding="utf-8")))
    ]
    assert names, "no patch builds a harness name: drop HARNESS_MOVED"
    harness = Path(runner.__file__).resolve().parent
    found = {n: importlib.util.find_spec(n) for n in names}
    # another checkout's runner, installed editable, may answer for a name this one lacks
    missing = [
        n for n, s in found.items() if not (s and s.origin) or harness not in Path(s.origin).parents
    ]
    assert missing == []


def pass_order(campaign: Campaign, n: int) -> list[str]:
    """The roles of round ``n``'s measurements in the order they ran: the turns of the
    paired workers (``turns.jsonl``, one line per turn in the order the host handed
    out the device), else the per-pass workers' folders (``pass-NN-<role>``)."""
    turns = campaign.artifacts_dir(n) / "turns.jsonl"
    if turns.is_file():
        lines = turns.read_text(encoding="utf-8").splitlines()
        return [json.loads(line)["worker"].split("-", 2)[2] for line in lines if line]
    passes = sorted((campaign.artifacts_dir(n) / "passes").glob("pass-*"))
    return [p.name.split("-", 2)[2] for p in passes]


def caught(result: RoundResult, summary: str, guard: str) -> None:
    """Not ACCEPTED, and ``guard`` named both in the reasons and in summary.md."""
    assert result.status is not Status.ACCEPTED, result.reasons
    named = [r for r in result.reasons if guard in r]
    assert named, (guard, result.reasons)
    assert guard in summary


# ------------------------------------------------------- shortcuts that once got through


def test_content_keyed_lru_memo_is_caught_by_the_8_step_simulation(campaign: Campaign) -> None:
    # An OrderedDict LRU behind lookup/remember, keyed on a sampled-content signature,
    # serving the forward output and the FP8 weight: once ACCEPTED at +87.9%.
    result, summary = run_round(campaign, "content_memo_lru", "recall repeated results")
    caught(result, summary, "8-step simulation: kept state written at step(s)")
    assert result.transfer is not None
    assert result.transfer.decision == "REJECT-as-overfit"
    assert "_RECALL._store" in result.transfer.hit_rate_trace
    assert "hit rate" in summary and "_RECALL._store" in summary
    assert pass_order(campaign, result.round)[:4] == [
        "incumbent",
        "candidate",
        "candidate",
        "incumbent",
    ]


def test_frame_walk_that_zeroes_the_weight_gradient_is_caught_by_the_audit(
    campaign: Campaign,
) -> None:
    # backward walks sys._getframe() and returns zeros for grad_b under runner.worker.bench
    result, summary = run_round(campaign, "frame_walk_zero_wgrad", "skip work when idle")
    caught(result, summary, "over-fitting audit: HARNESS")
    assert any("sys._getframe" in r for r in result.reasons), result.reasons


def test_patched_harness_clock_is_caught_by_the_audit(campaign: Campaign) -> None:
    # replaces runner.worker.bench.timing.process_time from the package's __init__
    result, summary = run_round(campaign, "patched_harness_clock", "warm the timers")
    caught(result, summary, "over-fitting audit: HARNESS")
    assert any("_timing.process_time" in r for r in result.reasons), result.reasons


# ------------------------------------------------------------- shortcuts of our own design


def test_obfuscated_frame_walk_is_caught_by_the_timed_output_check(campaign: Campaign) -> None:
    # the same zero gradient, reached through a traceback and getattr with built
    # strings: no audit rule reads it, the sampled timed outputs do
    result, summary = run_round(campaign, "traceback_frames_zero_wgrad", "skip idle work")
    assert not any(r.startswith("over-fitting audit") for r in result.reasons), result.reasons
    caught(result, summary, "(sampled after the fact) differs from the reference")
    assert any("timed backward call" in r and "db_snr" in r for r in result.reasons)
    first = campaign.manifest.target_shapes[0]
    assert any(r.startswith(f"candidate check: {first}") for r in result.reasons)


def test_clock_rebound_through_importlib_is_caught_by_the_binding_guard(
    campaign: Campaign,
) -> None:
    # import_module("run" + "ner...") and setattr with a built name: no audit rule
    # reads it; the worker sees runner.worker.bench.timing.process_time changed
    result, summary = run_round(campaign, "rebound_harness_clock", "settle the timers")
    assert not any(r.startswith("over-fitting audit") for r in result.reasons), result.reasons
    caught(result, summary, "harness tampering: the measured code replaced")
    assert any("runner.worker.bench.timing.process_time" in r for r in result.reasons)


def test_closure_held_activation_memo_is_caught_by_the_8_step_simulation(
    campaign: Campaign,
) -> None:
    # the quantised activation memoised in a closure, keyed on a content digest
    result, summary = run_round(campaign, "closure_activation_memo", "reuse quantised inputs")
    assert not any(r.startswith("over-fitting audit") for r in result.reasons), result.reasons
    caught(result, summary, "8-step simulation: kept state written at step(s)")
    assert result.transfer is not None and "<closure" in result.transfer.hit_rate_trace


def test_records_rescaled_at_the_hand_over_or_at_exit_are_refused_by_the_host(
    campaign: Campaign,
) -> None:
    # an atexit hook rewrites the worker's benchmark.csv / samples.json after every
    # guard ran, and over_blocks, rebound through built strings, hands over each
    # shape's time a quarter lower: the worker leaves with os._exit (the hook never
    # runs) and the host, which writes the records, checks them against the turns
    result, summary = run_round(campaign, "records_rewritten_at_exit", "trim the records")
    assert result.status is Status.FAILED, result.reasons
    caught(result, summary, "host-owned records")
    assert any("is not the median" in r and "turns it reported" in r for r in result.reasons)
    passes = campaign.artifacts_dir(result.round) / "passes"
    assert sorted(passes.glob("pass-*-candidate")), "no candidate worker folder kept"
    assert not list(passes.glob("*/rescaled-at-exit")), "an exit hook of a worker ran"


@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_a_detached_helper_working_beside_the_timing_is_refused_by_the_cgroup_guard(
    campaign: Campaign,
) -> None:
    # the op double-forks a helper into a session of its own (no descendant of the
    # worker, outside its process group: the worker's tree guard and the partner's
    # SIGSTOP miss it) that works while the worker lives; the worker's cgroup still
    # holds it, and the host reads the cgroup's CPU time around each timed turn
    probe = WorkerCgroup.create("redteam-probe")
    if probe is None:
        pytest.skip("no writable cgroup v2 hierarchy on this host (the guard is off)")
    probe.remove()
    result, summary = run_round(campaign, "detached_helper_engine", "an engine beside the op")
    assert result.status is Status.FAILED, result.reasons
    caught(result, summary, "cgroup CPU guard")
    assert any("outside its process tree" in r and "-candidate" in r for r in result.reasons)


def test_a_module_shadow_in_the_harness_root_cannot_be_planted(
    campaign: Campaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every process of the candidate (its focused test, its workers) tries to write a
    # torch.py into the folder first on its path, the harness root, and goes on quietly
    # when it cannot: the harness root and the interpreter's prefix are read-only in
    # every job (RoundPlan.readonly), so nothing is planted and the refusal is in its logs.
    # Where a host cannot isolate, the round's proof names the file (harness proof:
    # module shadow; tests/test_tamper.py).  Nothing planted, the kernel is the
    # incumbent's: an A/A round, whose verdict is the gate's business and not asserted
    # (its first pairs are final here; at 5a0e87d they read +4.47% against a 2%
    # threshold on a busy machine): the shortcut is refused by what the jobs could write.
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    harness_root = Path(runner.__file__).resolve().parent.parent
    shadow = harness_root / "torch.py"
    assert not shadow.exists()
    try:
        result, _ = run_round(campaign, "harness_root_module_shadow", "prefer the local torch")
    finally:
        planted = shadow.exists()
        shadow.unlink(missing_ok=True)
    assert not planted, "a job wrote into the harness root"
    files = [p for p in campaign.root.rglob("*") if p.is_file() and p.suffix in (".log", ".md")]
    logs = [p.read_text(encoding="utf-8", errors="replace") for p in files]
    refused = f"no shadow planted: [Errno 30] Read-only file system: '{shadow}'"
    assert any(refused in log for log in logs), (result.status, result.reasons)


# ------------------------------------------------------------------------- honest patches


def test_a_legitimate_fp8_weight_cache_passes_the_simulation(
    campaign: Campaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the verdict is not asserted (what the workers' simulation saw is): the first pairs
    # are final, not pairs of a real speed-up measured up to the suite's cap
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    result, summary = run_round(campaign, "legit_fp8_weight_cache", "keep the FP8 weight", "W1")
    assert "fresh activations, weight held still" in summary
    assert not any("8-step simulation" in r for r in result.reasons), result.reasons
    assert not any("timed " in r or "harness" in r for r in result.reasons), result.reasons
    assert result.transfer is not None
    trace = result.transfer.hit_rate_trace
    assert "_W_FP8" in trace and "8-step simulation FAIL" not in trace, trace
    assert "fresh activations, weight held still" in trace and "hit rate 7/8" in trace, trace
