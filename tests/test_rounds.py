"""Rounds end to end against real git repositories and real worker subprocesses.

Each test takes a private copy of the session's small campaign (``slow_tiny``: the
``tiny`` shape set, two baseline passes, a base commit that quantises the FP8 weight
three times), so the tests are independent; the accepted round removes that waste, an
effect far larger than the timing noise of a busy 2-core machine.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import SLOW_KERNEL, on_three_shapes, run_cli, speedup_patch

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.csv_io import read_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import CheckoutOffLineage, ConfigError, NothingToDo
from runner.core.outcomes import Status
from runner.executors.local import LocalExecutor
from runner.flow.new_campaign import EXAMPLES_DIR
from runner.flow.settings import set_gate_field
from runner.flow.validate import Request, validate_round
from runner.store.appendlog import verify
from runner.store.campaign import Campaign
from runner.store.lineage import MAX_PATCH_LINE, Lineage, patch_paths
from runner.store.sealed import heldout_labels

pytestmark = pytest.mark.integration

PATCHES = EXAMPLES_DIR / "demo_patches"
KERNEL = "turbo_kernels/cpu/gemm_fp8.py"
FACTS_KERNEL = "_gemm_fp8_blockwise_kernel"  # the facts of a TORCH campaign: the op's Triton file


@pytest.fixture
def campaign(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> Campaign:
    """A private copy of the session's baseline campaign (the slow base) and its source
    repository."""
    return Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))


@pytest.fixture
def three_shapes(campaign: Campaign) -> None:
    """``campaign`` on its three smallest target shapes, all of them representative,
    for a test of what a round does around its measurement: each run of a round
    prepares, times and re-checks a quarter fewer shapes, and the quick level still
    measures every target (no full-level confirmation is added)."""
    on_three_shapes(campaign, "a test of a round's interruption, not of its shapes")


def snapshot_records(c: Campaign) -> dict[str, bytes]:
    files = [c.optimize_log, c.trend_log, c.manifest_path]
    return {str(p): p.read_bytes() for p in files}


def lineage(c: Campaign) -> Lineage:
    return Lineage(Path(c.manifest.source), c.name, "optimize/t")


def test_baseline_writes_every_record(campaign: Campaign) -> None:
    m = campaign.manifest
    assert m.pinned_header == GEMM_SCHEMA.header
    assert 3 <= len(m.representative_shapes) <= 5
    held = heldout_labels(campaign.root, m)  # sealed (runner.store.sealed)
    assert len(held) == 1 and m.heldout_count == 1 and not m.heldout_shapes
    assert not set(held) & set(m.representative_shapes)
    assert m.sigma_g is not None and m.sigma_g > 0
    csv = read_csv(campaign.artifacts_dir(1) / "benchmark.csv", pinned=m.pinned_header)
    # the shape set's five shapes, less the one held out at init (never measured)
    assert [r.check for r in csv.rows] == ["PASS"] * 4
    assert held[0] not in csv.labels()
    art = campaign.artifacts_dir(1)
    assert (art / "quick_baseline.log").read_text().startswith("$ python ")
    assert (campaign.snapshot_dir(1) / KERNEL).is_file()
    assert campaign.quick_script.is_file()
    summary = campaign.summary_path(1).read_text()
    assert "no code changed" in summary and "BASELINE" in summary
    assert campaign.closed_rounds() == [1]
    assert lineage(campaign).head() == m.base_commit
    # the base's kernel facts: the incumbent side of round 2 (docs/analysis.md §1)
    facts = campaign.load_result(1).kernel_facts
    assert facts is not None and list(facts.roles) == ["incumbent"], facts
    base = facts.roles["incumbent"][FACTS_KERNEL]
    assert (base.facts["vgpr"] or 0) > 0 and (campaign.root / base.isa).is_file()
    assert "## Kernel facts" in summary and f"`{FACTS_KERNEL}`" in summary


def test_accept_commits_and_rollback_changes_nothing(
    campaign: Campaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round 2 (the demo's fp64-accumulate slow-down) is the working tree's diff, the
    default patch; its rollback puts the checkout back to the head by default (Rule 3),
    the edit kept under a ref and brought back by the command it prints; round 3 is a
    given patch, recorded as given."""
    lin = lineage(campaign)
    base = lin.head()
    source = Path(campaign.manifest.source)
    kernel = source / KERNEL
    original = kernel.read_text()
    slow = (PATCHES / "slowdown_fp64_accumulate.patch").read_text()
    subprocess.run(["git", "apply", "-"], cwd=source, input=slow, text=True, check=True)
    assert "ACCUM_DTYPE = torch.float64" in kernel.read_text()
    # the first pairs are final: a slow-down this large (-26% in the demo) is rolled back
    # on them, and a second wave up to the suite's cap would tell nothing more here
    with monkeypatch.context() as cap:
        cap.setenv(ROUND_CAP_ENV, "1")
        r2 = validate_round(
            campaign,
            LocalExecutor(),
            Request(2, "fp64 via working tree", None),
            progress=lambda _m: None,
        )
    assert r2.status is Status.ROLLED_BACK
    assert r2.gate is not None and r2.gate.delta_pct < 0
    assert lin.head() == base
    recorded = (campaign.round_dir(2) / "candidate.patch").read_text()
    assert patch_paths(recorded) == [KERNEL] and "+ACCUM_DTYPE = torch.float64" in recorded
    assert kernel.read_text() == original  # the rollback reset the working tree
    (line,) = [r for r in r2.reasons if r.startswith("checkout restored:")]
    assert "refs/campaigns/t/rolled-back/round-2" in line
    assert line in campaign.summary_path(2).read_text()
    again = line.split("bring it back with: ")[1].split()
    subprocess.run(again, check=True)
    assert "ACCUM_DTYPE = torch.float64" in kernel.read_text()
    subprocess.run(["git", "checkout", "-q", "--", KERNEL], cwd=source, check=True)
    assert (campaign.snapshot_dir(2) / KERNEL).read_text() != (
        campaign.snapshot_dir(1) / KERNEL
    ).read_text()
    fast = speedup_patch(campaign.root.parent.parent)
    # Upstream's VALIDATE step 5 (docs/upstream-loop.md §2): the speed-up removes a branch (a
    # high-risk change), so with a representative set smaller than the targets its quick
    # acceptance is confirmed at the full level, which then decides the round
    m = campaign.manifest
    held = heldout_labels(campaign.root, m)
    targets = [s for s in m.target_shapes if s not in held]
    why = "three representative shapes: the fourth only at the full level"
    set_gate_field(campaign, "representative_shapes", json.dumps(targets[:3]), why)
    # a robust gain, judged on 2 blocks (4 pairs) at each level: on one block a loaded CI
    # machine's full level read +63% +- 151% on 2 pairs (a pair's stdev 16.8%) at 317fe16
    request = Request(3, "quantise the weight once", fast, pairs=2)
    r3 = validate_round(campaign, LocalExecutor(), request, progress=lambda _m: None)
    assert r3.status is Status.ACCEPTED, r3.reasons
    (upgrade,) = [r for r in r3.reasons if "upgraded to the full level" in r]
    assert upgrade.endswith(": confirmed") and "high-risk: control flow changes in" in upgrade
    judged = {s.label for s in r3.gate.shapes} if r3.gate else set()
    assert set(targets) <= judged  # the full level's verdict: every target shape
    audit = json.loads((campaign.artifacts_dir(3) / "audit.json").read_text())
    assert audit["risks"] == [f"control flow changes in {SLOW_KERNEL} (If)"]
    assert (campaign.round_dir(3) / "candidate.patch").read_text() == fast
    head = lin.head()
    assert head == r3.commit and lin.parent(head) == base
    message = subprocess.run(
        ["git", "log", "-1", "--format=%B", head],
        cwd=campaign.manifest.source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert message.startswith(
        "[optimize] gemm_fp8_blockwise TORCH round-3: quantise the weight once\n\n"
    )
    assert "Hypothesis: quantise the weight once\nResult: geomean " in message
    branch = subprocess.run(
        ["git", "rev-parse", "optimize/t"],
        cwd=campaign.manifest.source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert branch == head
    trend = campaign.trend_log.read_text()
    assert "| round-2 | ROLLED BACK |" in trend and "| round-3 | ACCEPTED |" in trend
    for log in (campaign.optimize_log, campaign.trend_log):
        verify(log)


def test_a_checkout_behind_the_lineage_is_refused_unless_it_holds_the_rounds(
    campaign: Campaign,
) -> None:
    """Without --patch, a clean checkout left at the base after an accepted round (as
    `make demo` leaves it) would make a round of the accepted change undone: refused,
    nothing written.  A checkout that holds the accepted change and edits on gives just
    the new edit."""
    source = Path(campaign.manifest.source)
    lin = lineage(campaign)
    base = lin.head()
    accepted = speedup_patch(campaign.root.parent.parent)
    commit = lin.make_commit(base, accepted, "an accepted round")
    lin.advance(commit, base, move_branch=True)  # what an ACCEPTED round does
    before = snapshot_records(campaign)
    request = Request(2, "nobody changed anything", None)
    with pytest.raises(CheckoutOffLineage) as info:
        validate_round(campaign, LocalExecutor(), request, progress=lambda _m: None)
    assert f"checkout --detach {commit[:12]}" in str(info.value) and "--patch" in str(info.value)
    assert snapshot_records(campaign) == before and not campaign.round_dir(2).exists()
    subprocess.run(["git", "apply", "-"], cwd=source, input=accepted, text=True, check=True)
    kernel = source / KERNEL
    kernel.write_text(
        kernel.read_text().replace("ACCUM_DTYPE = torch.float32", "ACCUM_DTYPE = torch.float64")
    )
    patch = Lineage(source, campaign.name, None).working_tree_patch()
    assert patch_paths(patch) == [KERNEL] and "+ACCUM_DTYPE = torch.float64" in patch


@pytest.mark.parametrize(
    ("tail", "says"),
    [
        (b"# caf\xe9\n", ("is not UTF-8 text", "git diff --binary")),
        (b"+" + b"x" * (MAX_PATCH_LINE + 1) + b"\n", ("a line of", "over the 1048576 bytes")),
    ],
    ids=["not-utf8", "line-too-long"],
)
def test_a_patch_file_that_is_not_utf8_text_is_refused(
    campaign: Campaign,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    tail: bytes,
    says: tuple[str, str],
) -> None:
    """Bounded patch intake: non-UTF-8 bytes, or one line over MAX_PATCH_LINE, are
    exit 2 before anything is made."""
    from runner.cli import main

    before = snapshot_records(campaign)
    bad = tmp_path / "bad.patch"
    bad.write_bytes((PATCHES / "speedup_reuse_fp8_weight.patch").read_bytes() + tail)
    argv = [
        "--campaigns-root",
        str(campaign.root.parent),
        "validate",
        "--round",
        "2",
        "--hypothesis",
        "h",
        "--patch",
        str(bad),
    ]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == ConfigError.return_code
    err = capsys.readouterr().err
    assert all(text in err for text in says) and "Traceback" not in err
    assert snapshot_records(campaign) == before and not campaign.round_dir(2).exists()


def test_a_source_that_is_gone_is_a_clear_error(
    campaign: Campaign, capsys: pytest.CaptureFixture[str]
) -> None:
    """The manifest's source moved away: exit 2 naming the folder (git is installed;
    "not found on PATH" would send the user after the wrong thing)."""
    from runner.cli import main

    manifest = campaign.manifest_path
    source = campaign.manifest.source
    manifest.write_text(manifest.read_text().replace(source, "/nonexistent/src"))
    patch = PATCHES / "speedup_reuse_fp8_weight.patch"
    argv = [
        "--campaigns-root",
        str(campaign.root.parent),
        "validate",
        "--round",
        "2",
        "--hypothesis",
        "h",
        "--patch",
        str(patch),
    ]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err
    assert exc.value.code == ConfigError.return_code, err
    assert "/nonexistent/src" in err and "does not exist" in err and "not found on PATH" not in err
    assert not campaign.round_dir(2).exists()


def test_refusals_write_nothing(campaign: Campaign) -> None:
    before = snapshot_records(campaign)
    fast = (PATCHES / "speedup_reuse_fp8_weight.patch").read_text()
    cases = [
        (Request(3, "wrong number", fast), ConfigError, "validate --round 2"),
        (Request(1, "reuse baseline number", fast), ConfigError, "never reused"),
        (Request(2, "empty", ""), NothingToDo, "patch is empty"),
        (Request(2, "no apply", _break_context(fast)), ConfigError, "does not apply"),
        (Request(2, "   ", fast), ConfigError, "hypothesis"),
    ]
    for request, error, words in cases:
        with pytest.raises(error, match=words):
            validate_round(campaign, LocalExecutor(), request, progress=lambda _m: None)
    assert snapshot_records(campaign) == before
    assert not campaign.round_dir(2).exists()
    assert campaign.next_round() == 2


def test_a_crashing_worker_records_a_failed_round_and_nothing_else(
    campaign: Campaign, capsys: pytest.CaptureFixture[str]
) -> None:
    source = Path(campaign.manifest.source)
    kernel = source / KERNEL
    original = kernel.read_text()
    # a worker runs as ``-m runner.worker``: its argv[0] is the package's __main__.py
    crash = (
        'import os\nimport sys\n\nif sys.argv[0].endswith("worker/__main__.py"):\n    os._exit(3)\n'
    )
    kernel.write_text(original.replace("import torch\n", "import torch\n" + crash, 1))
    patch = Lineage(source, campaign.name, None).working_tree_patch()
    kernel.write_text(original)
    head = lineage(campaign).head()
    r2 = validate_round(
        campaign, LocalExecutor(), Request(2, "crash", patch), progress=lambda _m: None
    )
    assert r2.status is Status.FAILED
    assert "failed (exit 3)" in r2.reasons[0]
    assert lineage(campaign).head() == head
    assert "| round-2 | FAILED |" in campaign.trend_log.read_text()
    assert campaign.next_round() == 3
    # the failed round still records both roles' kernel facts, shown by summary and show
    facts = campaign.load_result(2).kernel_facts
    assert facts is not None and set(facts.roles) == {"incumbent", "candidate"}, facts
    assert "## Kernel facts" in campaign.summary_path(2).read_text()
    code, out = run_cli(["--campaigns-root", str(campaign.root.parent), "show", "2"], capsys)
    assert code == 0 and "## Kernel facts" in out and f"`{FACTS_KERNEL}`" in out, out


@pytest.mark.usefixtures("three_shapes")
def test_an_interrupt_mid_round_records_nothing_and_the_round_can_run_again(
    campaign: Campaign, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = snapshot_records(campaign)
    patch_file = PATCHES / "speedup_reuse_fp8_weight.patch"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "--campaigns-root",
        str(campaign.root.parent),
        "validate",
        "--round",
        "2",
        "--hypothesis",
        "reuse fp8 weight",
        "--patch",
        str(patch_file),
    ]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp)}
    # SIGINT as a terminal gives it: a suite started as a background job (``&``) starts
    # with SIGINT ignored, and Python then installs no handler in the child
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        preexec_fn=_default_sigint,
    )
    deadline = time.time() + 120
    while "pass-01-incumbent" not in _peek(tmp) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert snapshot_records(campaign) == before
    assert not campaign.result_path(2).exists()
    assert campaign.next_round() == 2
    leftover = subprocess.run(
        ["git", "worktree", "list"],
        cwd=campaign.manifest.source,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert leftover.count("\n") == 1, leftover
    assert not list(tmp.glob("turbo-campaign-*")), "temporary folders left behind"
    # any clean verdict (below): the first pairs are final, not pairs of the demo's
    # small speed-up measured up to the suite's cap
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    again = validate_round(
        campaign,
        LocalExecutor(),
        Request(2, "reuse fp8 weight", patch_file.read_text()),
        progress=lambda _m: None,
    )
    assert again.status in (Status.ACCEPTED, Status.ROLLED_BACK)
    assert campaign.closed_rounds() == [1, 2]


def test_an_interrupt_dropped_by_a_callback_still_stops_the_round(campaign: Campaign) -> None:
    """A SIGINT whose KeyboardInterrupt Python dropped (it came inside the logging
    module's fork handler while the round started a worker: the CI run of the
    run of 2312e40 (2026-12-03), where the round then ran on and recorded its verdict) is raised
    at the round's next step, and the round records nothing."""
    from runner.core import interrupts

    before = snapshot_records(campaign)
    patch = PATCHES / "speedup_reuse_fp8_weight.patch"
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with interrupts.installed():
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)
            except KeyboardInterrupt:
                pass  # dropped, as an "Exception ignored in" callback drops it
            with pytest.raises(KeyboardInterrupt):
                validate_round(
                    campaign,
                    LocalExecutor(),
                    Request(2, "reuse fp8 weight", patch.read_text()),
                    progress=lambda _m: None,
                )
        interrupts.check()  # left: the flag is forgotten, the next run starts clean
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, old)
    assert snapshot_records(campaign) == before
    assert campaign.next_round() == 2


def _break_context(patch: str) -> str:
    """The same patch with its first context line changed: it no longer applies."""
    lines = patch.splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.startswith("@@"))
    context = next(i for i in range(first + 1, len(lines)) if lines[i].startswith(" "))
    lines[context] = " # not in the file" + lines[context][1:]
    assert "".join(lines) != patch
    return "".join(lines)


def _default_sigint() -> None:
    """In the child before exec: SIGINT back to its default disposition."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _peek(root: Path) -> str:
    """Which worker passes have started (their folders in the round's temp folder)."""
    names = []
    for tmp in root.glob("turbo-campaign-*"):
        if tmp.is_dir():
            names += [p.name for p in tmp.iterdir()]
    return " ".join(names)


def test_a_correctness_fail_is_an_attempt_of_the_same_round(campaign: Campaign) -> None:
    """Rule 6: a candidate that fails its focused test is not a round: recorded as failed
    attempt 1 of round 2 (exit 3, the edit left in the checkout to fix), round 2 stays
    the next round, and no rollback counts toward escalation."""
    from runner.core.errors import CorrectnessFailed
    from runner.render.status import collect_status

    source = Path(campaign.manifest.source)
    kernel = source / KERNEL
    wrong = kernel.read_text().replace(
        "    return acc.to(out_dtype)", "    return (2 * acc).to(out_dtype)"
    )
    kernel.write_text(wrong)
    with pytest.raises(CorrectnessFailed, match="failed attempt 1 of round 2") as info:
        validate_round(
            campaign, LocalExecutor(), Request(2, "double it", None), progress=lambda _m: None
        )
    assert info.value.return_code == 3
    assert kernel.read_text() == wrong  # to be fixed, not rolled back
    campaign = Campaign.load(campaign.root)
    assert campaign.closed_rounds() == [1] and campaign.next_round() == 2
    kept = campaign.round_dir(2) / "attempts" / "attempt-1" / "candidate.patch"
    assert "(2 * acc)" in kept.read_text()
    assert (kept.parent / "kernel_snapshot" / KERNEL).read_text() == wrong  # Rule 5
    assert "#### round-2 attempt 1 — correctness FAIL" in campaign.optimize_log.read_text()
    verify(campaign.optimize_log)
    status = collect_status(campaign)
    assert status.consecutive_rollbacks == 0 and status.escalation is None
    assert "1 failed attempt(s), correctness FAIL" in status.unclosed_why[2]
