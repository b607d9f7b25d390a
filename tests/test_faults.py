"""Kill at every step (docs/reliability.md): a real ``campaign validate`` (a subprocess
of the CLI on a CPU campaign of the example package) is stopped with SIGKILL at each
step of a round in turn, with the documented pause hook ``TURBO_CAMPAIGN_PAUSE_AT``
(runner.core.pause_points).  After each kill: no worker alive (the paused worker itself
dies with the campaign), no half-written record, ``campaign status`` names the step
where the round stopped, the next command clears the worktrees and temporary folders
of the killed one, the ledgers verify and no earlier record changed by a byte.  The
last attempt closes the round (ACCEPTED: the candidate removes the slow base's waste,
``campaign_helpers.plant_slow_base``) and is killed before the lineage ref moves; the
next command moves it.

The file works on a copy of the session's ``slow_tiny`` campaign (no baseline of its
own), on its three smallest shapes (there its planted effect is ~1.8x, decided in
three pairs, within the product's quick cap of 150 s even on a loaded machine); the
campaign's commands run with a private TMPDIR, so the worktrees, job folders and
workers the test looks for are this file's alone, whatever another test of a campaign
named ``t`` runs beside it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from campaign_helpers import on_three_shapes

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.pause_points import PAUSE_ENV, PAUSE_FILE_ENV
from runner.core.processes import pid_alive
from runner.flow.settings import set_gate_field
from runner.judge.measuring_caps import ROUND_CAP_S
from runner.store.campaign import Campaign
from runner.store.guard import check_records
from runner.store.leftovers import JOB_PREFIX, WORKTREE_PREFIX, partial_files
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
HYPOTHESIS = "Quantise each FP8 weight once: the base quantises it three times (expected: faster)."
WAIT_S = 900
# The focused test of every attempt: one case of the op's test file (under test here
# are the kills; the file's pytest start-up and imports still run, and the candidate's
# numbers are still checked).  Set with `campaign set`, so the change is recorded.
FOCUSED = (
    "python -m pytest tests/test_example_gemm_fp8.py -q -p no:cacheprovider"
    " -k 128x256x512-NN-blockwise"
)


def _git(cwd: Path, *args: str, stdin: str | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    out = subprocess.run(
        ["git", *args], cwd=cwd, input=stdin, capture_output=True, text=True, env=env
    )
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def slow_campaign(
    slow_tiny: Path,
    tmp_path_factory: pytest.TempPathFactory,
    copy_campaign: Callable[[Path, Path, str], Path],
) -> Iterator[tuple[Campaign, Path]]:
    """A private copy of ``slow_tiny`` (its baseline, its source) and the patch that
    removes the slow base's waste (a robust ACCEPT)."""
    root = tmp_path_factory.mktemp("faults")
    campaign = Campaign.load(copy_campaign(slow_tiny, root / "copy", "t"))
    set_gate_field(campaign, "test_command", FOCUSED, "test_faults: the kills are under test")
    # Three shapes, not four: each of the five attempts that measure prepares, times and
    # re-checks a quarter fewer (about 20 s less each on 2 idle cores), and on the
    # smallest three the slow base's waste is a larger part of a step (about +85% a
    # pair, not +50%).  The targets are the representative shapes: no quick acceptance
    # is confirmed at the full level.
    campaign = on_three_shapes(campaign, "test_faults: the kills are under test, not the shapes")
    _temp_root(campaign).mkdir()  # the campaign commands' TMPDIR (module docstring)
    yield campaign, root / "copy" / "speedup.patch"


def _temp_root(campaign: Campaign) -> Path:
    """The private TMPDIR of this file's campaign commands: ``tmp`` beside the campaigns
    root."""
    return campaign.root.parent.parent / "tmp"


def _env(step: str | None, marker: Path, campaign: Campaign) -> dict[str, str]:
    env = dict(os.environ)
    env["TMPDIR"] = str(_temp_root(campaign))
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "examples")])
    # The closing attempts measure a +50% gain that still needs 3 re-measurements: the
    # suite's 45 s cap (conftest WORKER_LIMITS) held only 2 pairs on a loaded CI machine
    # (14 s to the first turn) and rolled it back as too volatile; the product's quick cap.
    # An attempt killed while its records are written never closes its round, and those
    # steps come for any verdict: its first pairs are final (cap 1 s).
    env[ROUND_CAP_ENV] = "1" if step in ANY_VERDICT else str(ROUND_CAP_S["quick"])
    env.pop(PAUSE_ENV, None)
    if step:
        env[PAUSE_ENV] = step
        env[PAUSE_FILE_ENV] = str(marker)
    return env


def _cli(campaign: Campaign, *args: str) -> list[str]:
    return [sys.executable, "-m", "runner", "--campaigns-root", str(campaign.root.parent), *args]


def _validate_argv(campaign: Campaign, patch: Path) -> list[str]:
    return _cli(
        campaign,
        "validate",
        "--campaign",
        campaign.name,
        "--round",
        "2",
        "--hypothesis",
        HYPOTHESIS,
        "--patch",
        str(patch),
        "--pairs",
        "1",
    )


def _run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=WAIT_S)


def _workers(campaign: Campaign) -> list[int]:
    """Worker processes of this campaign (their spec lies in its job folder)."""
    jobs = f"{_temp_root(campaign)}/{JOB_PREFIX}{campaign.name}-"
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            args = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        text = [a.decode(errors="replace") for a in args]
        ours = "runner.worker" in text and any(a.startswith(jobs) for a in text)
        if ours and pid_alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def _leftover_dirs(campaign: Campaign) -> list[Path]:
    tmp, name = _temp_root(campaign), campaign.name
    return sorted([*tmp.glob(f"{JOB_PREFIX}{name}-*"), *tmp.glob(f"{WORKTREE_PREFIX}{name}-*")])


def _registered_worktrees(source: Path) -> list[str]:
    out = _git(source, "worktree", "list", "--porcelain")
    return [ln.split(" ", 1)[1] for ln in out.splitlines() if ln.startswith("worktree ")][1:]


def _snapshot(campaign: Campaign) -> dict[str, bytes]:
    """Every file of the closed rounds, and the logs."""
    files = {}
    for n in campaign.closed_rounds():
        for p in sorted(campaign.round_dir(n).rglob("*")):
            if p.is_file():
                files[str(p.relative_to(campaign.root))] = p.read_bytes()
    for p in sorted(campaign.logs_dir.iterdir()):
        files[str(p.relative_to(campaign.root))] = p.read_bytes()
    return files


def _unchanged(before: dict[str, bytes], campaign: Campaign) -> None:
    """Closed rounds identical; logs and ledgers only grew (the old bytes a prefix)."""
    for rel, data in before.items():
        now = (campaign.root / rel).read_bytes()
        if rel.startswith("logs/"):
            assert now.startswith(data), f"{rel} was rewritten"
        else:
            assert now == data, f"{rel} changed"


def _kill_at(
    step: str, campaign: Campaign, patch: Path, marker: Path
) -> tuple[int, subprocess.Popen[str]]:
    """Start a validate that pauses at ``step``; return the paused pid and the process."""
    marker.unlink(missing_ok=True)
    proc = subprocess.Popen(
        _validate_argv(campaign, patch),
        env=_env(step, marker, campaign),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + WAIT_S
    while not marker.exists():
        if proc.poll() is not None:
            assert proc.stdout is not None
            with proc.stdout:  # closed before failing: no pipe left for a later test
                out = proc.stdout.read()
            pytest.fail(f"validate ended before step {step}:\n{out}")
        assert time.monotonic() < deadline, f"step {step} not reached in {WAIT_S} s"
        time.sleep(0.2)
    got, pid = marker.read_text().split()
    assert got == step
    return int(pid), proc


def _sigkill(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGKILL)  # the campaign process only, not its group
    proc.wait()
    assert proc.stdout is not None
    proc.stdout.close()


def _wait_gone(pids: list[int], seconds: float = 10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def _status(campaign: Campaign, marker: Path) -> subprocess.CompletedProcess[str]:
    argv = _cli(campaign, "status", "--campaign", campaign.name)
    return _run(argv, _env(None, marker, campaign))


# (pause step, the step `campaign status` reports for the killed round)
# ("commit" and "advance" come only for an ACCEPTED round; every step after the
# measurement in ANY_VERDICT comes whatever the verdict)
STEPS = [
    ("candidate-tree", "candidate tree"),
    ("worker-test", "test-candidate"),
    ("worker-pass", "pass-0"),  # paired workers all start before the first one pauses
    ("commit", "lineage commit"),
    ("artifacts", "artifacts"),
    ("logs", "records"),
    ("records", "records"),
]
ANY_VERDICT = ("artifacts", "logs", "records")


def test_kill_at_every_step(slow_campaign: tuple[Campaign, Path], tmp_path: Path) -> None:
    campaign, patch = slow_campaign
    source = Path(campaign.manifest.source)
    marker = tmp_path / "paused"
    before = _snapshot(campaign)
    lineage = Lineage(source, campaign.name, branch_name(campaign.manifest))
    base_head = lineage.head()
    previous: list[Path] = []
    for step, noted in STEPS:
        pid, proc = _kill_at(step, campaign, patch, marker)
        # the next command (this one) cleared what the previous kill left behind
        assert not set(previous) & set(_leftover_dirs(campaign)), step
        assert all(
            not Path(w).is_relative_to(p) for w in _registered_worktrees(source) for p in previous
        ), step
        workers = _workers(campaign)
        if step.startswith("worker-"):
            assert pid in workers, f"{step}: the paused process is not a worker"
        previous = _leftover_dirs(campaign)
        _sigkill(proc)
        assert _wait_gone([pid, *workers]) == [], f"{step}: a worker outlived its campaign"
        assert _workers(campaign) == []
        # no half-written record; the ledgers verify; nothing earlier changed
        assert check_records(campaign) == [], step
        for p in campaign.root.rglob("*.json"):
            json.loads(p.read_text(encoding="utf-8"))
        _unchanged(before, campaign)
        assert 2 not in campaign.closed_rounds(), step
        status = _status(campaign, marker)
        assert status.returncode == 0, status.stdout + status.stderr
        assert "unclosed rounds: round-2" in status.stdout
        assert f"round-2 stopped: last step '{noted}" in status.stdout, status.stdout
        assert "no longer running" in status.stdout
        assert lineage.head() == base_head, f"{step}: the lineage moved for an unclosed round"

    # the re-run closes the round; killed after the records, before the ref update
    pid, proc = _kill_at("advance", campaign, patch, marker)
    _sigkill(proc)
    assert 2 in campaign.closed_rounds()
    result = campaign.load_result(2)
    assert result.status.value == "ACCEPTED", result.reasons
    assert lineage.head() == base_head
    status = _status(campaign, marker)
    assert "round-2 closed ACCEPTED but the lineage head is still its parent" in status.stdout
    assert "unclosed rounds: none" in status.stdout
    optimize = campaign.optimize_log.read_text(encoding="utf-8")
    assert optimize.count("### round-2 — ") == 1  # a killed close never duplicates an entry
    trend = campaign.trend_log.read_text(encoding="utf-8")
    assert trend.count("| round-2 |") == 1

    # the next command moves the lineage head and clears the last leftovers
    report = _run(
        _cli(campaign, "report", "--campaign", campaign.name), _env(None, marker, campaign)
    )
    assert report.returncode == 0, report.stdout + report.stderr
    assert lineage.head() == result.commit
    assert lineage.linear_history(campaign.manifest.base_commit or "") == [result.commit]
    assert _leftover_dirs(campaign) == []
    assert _registered_worktrees(source) == []
    assert partial_files(campaign.root) == []
    assert check_records(campaign) == []
    _unchanged(before, campaign)
    status = _status(campaign, marker)
    assert status.returncode == 0 and "chain integrity: OK" in status.stdout, status.stdout


def test_hand_edit_is_refused_before_any_work(
    slow_campaign: tuple[Campaign, Path], tmp_path: Path
) -> None:
    """After a hand edit of optimize.md: status exits non-zero naming the file and
    byte range; validate exits 5 within seconds, before measuring anything."""
    campaign, patch = slow_campaign
    copy = tmp_path / "campaigns" / campaign.name
    shutil.copytree(campaign.root, copy, ignore=shutil.ignore_patterns(".lock"))
    manifest = copy / "manifest.yaml"  # the copy's home is the copy (campaign relocate)
    manifest.write_text(manifest.read_text().replace(str(campaign.root), str(copy)))
    edited = Campaign.load(copy)
    _temp_root(edited).mkdir()
    log = edited.optimize_log
    data = log.read_bytes()
    at = data.index(b"## ") + 3
    log.write_bytes(data[:at] + b"X" + data[at + 1 :])
    marker = tmp_path / "m"
    status = _status(edited, marker)
    assert status.returncode == 5, status.stdout + status.stderr
    assert "chain integrity: BROKEN" in status.stdout
    assert str(log) in status.stderr
    assert "first difference between byte" in status.stdout
    t0 = time.monotonic()
    argv = _cli(
        edited,
        "validate",
        "--campaign",
        edited.name,
        "--round",
        str(edited.next_round()),
        "--hypothesis",
        "h",
        "--patch",
        str(patch),
    )
    got = _run(argv, _env(None, marker, edited))
    assert got.returncode == 5, got.stdout + got.stderr
    assert time.monotonic() - t0 < 30
    assert str(log) in got.stderr and "append a correction" in got.stderr
    assert "Nothing was measured or written" in got.stderr
    assert not re.search(r"\.\. [0-9:]* ?round-", got.stderr)  # no step of a round started
    assert not edited.round_dir(edited.next_round()).exists()
