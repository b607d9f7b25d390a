"""docs/reliability.md §7 row 3: what steers the gate is ledgered.  The fields the verdict needs
are fixed at the baseline (``logs/gate_fields.jsonl``); a hand edit of manifest.yaml
breaks the chain (status BROKEN naming the field, validate exit 5 before measuring),
``campaign set`` records a deliberate change, and a campaign made before keeps working
("not ledgered")."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest
from campaign_helpers import committed_repo, git, run_cli, tiny_campaign

from runner.core.errors import InfrastructureError
from runner.flow.new_campaign import EXAMPLES_DIR
from runner.flow.settings import parse_value
from runner.judge import gate
from runner.judge.gate_constants import changed_names, current_digest, digest, gate_constants
from runner.store.appendlog import append
from runner.store.campaign import Campaign
from runner.store.gate_ledger import (
    LEDGER_NAME,
    LEDGERED_NOTE,
    gate_values,
    ledger_file,
    record,
    values_sha,
)
from runner.store.lineage import Lineage

PATCH = EXAMPLES_DIR / "demo_patches" / "slowdown_fp64_accumulate.patch"


def _edit(campaign: Path, key: str, value: str) -> None:
    manifest = campaign / "manifest.yaml"
    text, n = re.subn(rf"(?m)^{key}: .*$", f"{key}: {value}", manifest.read_text("utf-8"))
    assert n == 1
    manifest.write_text(text, encoding="utf-8")


def test_parse_value() -> None:
    assert parse_value("5%") == pytest.approx(0.05)
    assert parse_value("0.01") == 0.01
    assert parse_value("[a, b, c]") == ["a", "b", "c"]
    assert parse_value("Forward TFLOPS") == "Forward TFLOPS"


@pytest.mark.integration
def test_sigma_g_edited_after_the_baseline_is_broken_and_refused(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = Campaign.load(demo_copy)
    root = ["--campaigns-root", str(demo_copy.parent)]
    assert (camp.logs_dir / LEDGER_NAME).is_file()
    assert any(LEDGERED_NOTE in r for r in camp.load_result(1).reasons)
    # every round's result.json names the gate constants that judged it
    for n in camp.closed_rounds():
        data = json.loads(camp.result_path(n).read_text("utf-8"))
        assert data["gate_constants"] == current_digest(), n
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate fields: ledgered, unchanged" in out, out
    _edit(demo_copy, "sigma_g", "1.0e-06")
    logs = {p: p.read_bytes() for p in camp.logs_dir.iterdir()}
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5, out
    assert "chain integrity: BROKEN" in out and "sigma_g" in out
    assert "`campaign set FIELD VALUE --reason TEXT`" in out
    n = camp.next_round()
    argv = [*root, "validate", "--round", str(n), "--hypothesis", "h", "--patch", str(PATCH)]
    code, out = run_cli(argv, capsys)
    assert code == 5 and "sigma_g" in out and "campaign set" in out, out
    assert not camp.round_dir(n).exists()
    assert {p: p.read_bytes() for p in camp.logs_dir.iterdir()} == logs
    # a second hand edit: primary_metric, named too
    _edit(demo_copy, "primary_metric", "Forward TFLOPS")
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "primary_metric, sigma_g" in out, out
    # `campaign set` refuses to ledger the other hand edit silently
    code, out = run_cli([*root, "set", "sigma_g", "0.05", "--reason", "r"], capsys)
    assert code == 5 and "primary_metric" in out, out


@pytest.mark.integration
def test_campaign_set_records_the_change_and_status_stays_ok(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = Campaign.load(demo_copy)
    root = ["--campaigns-root", str(demo_copy.parent)]
    opt = camp.optimize_log.read_bytes()
    before = values_sha(gate_values(camp.manifest))
    reason = "recalibrated on a quiet host"
    code, out = run_cli([*root, "set", "sigma_g", "5%", "--reason", reason], capsys)
    assert code == 0, out
    grown = camp.optimize_log.read_bytes()
    assert grown.startswith(opt) and b"gate field sigma_g:" in grown[len(opt) :]
    again = Campaign.load(demo_copy)
    assert again.manifest.sigma_g == pytest.approx(0.05)
    lines = (camp.logs_dir / LEDGER_NAME).read_text("utf-8").splitlines()
    last = json.loads(lines[-1])
    assert len(lines) == 2 and last["by"] == "campaign set" and reason in last["reason"]
    assert last["sha256"] == values_sha(gate_values(again.manifest)) != before
    code, out = run_cli([*root, "set", "primary_metric", "Forward TFLOPS", "--reason", "r"], capsys)
    assert code == 0, out
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "chain integrity: OK" in out, out
    assert "gate fields: ledgered, unchanged" in out
    assert run_cli([*root, "set", "sigma_g", "-1", "--reason", "r"], capsys)[0] == 2
    assert run_cli([*root, "set", "sigma_g", "0.1", "--reason", " "], capsys)[0] == 2
    assert run_cli([*root, "set", "source", "/x", "--reason", "r"], capsys)[0] == 2


@pytest.mark.integration
def test_a_campaign_made_before_is_not_ledgered_and_a_deleted_ledger_is_broken(
    demo_copy: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = Campaign.load(demo_copy)
    root = ["--campaigns-root", str(demo_copy.parent)]
    for p in camp.logs_dir.glob(f"{LEDGER_NAME}*"):
        p.unlink()
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "deleted with its ledger" in out, out
    # a campaign made before the ledger: its baseline says nothing about one
    path = camp.result_path(1)
    data = json.loads(path.read_text("utf-8"))
    data["reasons"] = [r for r in data["reasons"] if LEDGERED_NOTE not in r]
    path.write_text(json.dumps(data), encoding="utf-8")
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate fields: not ledgered" in out, out
    # its first `campaign set` starts the ledger
    code, out = run_cli([*root, "set", "pairs", "2", "--reason", "start the ledger"], capsys)
    assert code == 0, out
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate fields: ledgered, unchanged" in out, out


# ---- the gate's own constants ------------------------------------------------------------
# The product collects them (runner.judge.gate_constants, one place for the concern): a
# constant added, removed or changed there fails the test below until
# docs/gate-constants.jsonl records it (docs/protocol.md §5.3).
CONSTANTS_LEDGER = Path(__file__).resolve().parent.parent / "docs" / "gate-constants.jsonl"


def test_the_gates_constants_are_ledgered() -> None:
    """A change to any gate constant fails here until its line is appended to the
    ledger (never an edit of a line: each entry's sha256 is over its constants)."""
    entries = [json.loads(line) for line in CONSTANTS_LEDGER.read_text("utf-8").splitlines()]
    assert entries, CONSTANTS_LEDGER
    for entry in entries:
        assert entry["why"].strip() and entry["when"], entry
        text = json.dumps(entry["constants"], sort_keys=True, separators=(",", ":"))
        assert hashlib.sha256(text.encode("utf-8")).hexdigest() == entry["sha256"], (
            f"{CONSTANTS_LEDGER}: the entry of {entry['when']} was edited; append, never edit"
        )
    now, recorded = gate_constants(), entries[-1]["constants"]
    changed = changed_names(recorded, now)
    line = json.dumps(
        {"when": "YYYY-MM-DD", "why": "WHY", "constants": now, "sha256": digest(now)},
        sort_keys=True,
    )
    assert not changed, (
        f"gate constants changed without a record: {', '.join(changed)}; append this line "
        f"to {CONSTANTS_LEDGER.name} (with the date and why) and a CHANGELOG note:\n{line}"
    )


# ---- a campaign's own record of the gate constants that judge it --------------------------
def _ledgered(tmp_path: Path) -> tuple[Campaign, list[str]]:
    """A campaign (no measurement) whose gate-field ledger the baseline's call wrote."""
    camp = tiny_campaign(tmp_path, "gc", baseline=False)
    record(camp, "baseline", "fixed at the baseline")
    return camp, ["--campaigns-root", str(camp.root.parent)]


def test_the_gate_constants_that_judge_a_campaign_are_ledgered_and_an_upgrade_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    camp, root = _ledgered(tmp_path)
    entry = json.loads(ledger_file(camp).read_text("utf-8").splitlines()[-1])
    assert entry["constants"] == {"sha256": current_digest(), "values": gate_constants()}
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate constants: ledgered, the running code's" in out, out
    # a turbo-campaign upgrade that raises the direct-accept floor to 3%
    monkeypatch.setattr(gate, "MIN_THRESHOLD", 0.03)
    logs = {p: p.read_bytes() for p in camp.logs_dir.iterdir()}
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "chain integrity: BROKEN" in out, out
    assert "runner.judge.gate.MIN_THRESHOLD 0.02 -> 0.03" in out and "accept_threshold" in out
    assert "gate constants: BROKEN" in out and "gate fields: ledgered, unchanged" in out
    assert "do not verify (the gate's constants); for the gate's constants: run" in out, out
    argv = [*root, "validate", "--round", "2", "--hypothesis", "h", "--patch", str(PATCH)]
    code, out = run_cli(argv, capsys)
    assert code == 5 and "MIN_THRESHOLD" in out, out
    assert "`campaign set gate_constants current --reason TEXT`" in out
    assert not camp.round_dir(2).exists()
    # nothing ledgers the new constants on the side
    code, out = run_cli([*root, "set", "pairs", "4", "--reason", "r"], capsys)
    assert code == 5 and "gate_constants" in out, out
    assert {p: p.read_bytes() for p in camp.logs_dir.iterdir()} == logs
    assert run_cli([*root, "set", "gate_constants", "0.03", "--reason", "r"], capsys)[0] == 2
    reason = "upgraded: the 3% floor"
    code, out = run_cli([*root, "set", "gate_constants", "current", "--reason", reason], capsys)
    assert code == 0, out
    grown = camp.optimize_log.read_bytes()
    assert b"gate constants: " in grown[len(logs[camp.optimize_log]) :]
    last = json.loads(ledger_file(camp).read_text("utf-8").splitlines()[-1])
    assert last["constants"]["sha256"] == current_digest() != entry["constants"]["sha256"]
    assert last["by"] == "campaign set" and reason in last["reason"]
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate constants: ledgered, the running code's" in out, out
    monkeypatch.undo()  # the old code again: judged with other constants than ledgered
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "runner.judge.gate.MIN_THRESHOLD 0.03 -> 0.02" in out, out


def test_a_campaign_ledgered_before_the_constants_is_not_ledgered_until_set(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    camp = tiny_campaign(tmp_path, "gc", baseline=False)
    root = ["--campaigns-root", str(camp.root.parent)]
    values = gate_values(camp.manifest)  # an entry as the code before wrote it
    old = {
        "when": "2026-12-01 10:00",
        "by": "baseline",
        "reason": "fixed at the baseline",
        "sha256": values_sha(values),
        "fields": values,
    }
    append(ledger_file(camp), json.dumps(old, sort_keys=True) + "\n")
    monkeypatch.setattr(gate, "MIN_THRESHOLD", 0.03)  # whatever the running code holds
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "chain integrity: OK" in out, out
    assert "gate constants: not ledgered" in out and "gate fields: ledgered, unchanged" in out
    code, out = run_cli([*root, "set", "gate_constants", "current", "--reason", "start"], capsys)
    assert code == 0 and "not ledgered -> " in out, out
    code, out = run_cli([*root, "status"], capsys)
    assert code == 0 and "gate constants: ledgered, the running code's" in out, out


# ---- the campaign's identity is ledgered with the gate fields ----------------------------
def test_a_hand_edited_base_commit_is_broken_and_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp, root = _ledgered(tmp_path)
    entry = json.loads(ledger_file(camp).read_text("utf-8").splitlines()[-1])
    assert entry["identity"]["base_commit"] == camp.manifest.base_commit
    assert entry["identity"]["lineage_ref"] == f"refs/campaigns/{camp.name}/head"
    source = Path(camp.manifest.source)
    (source / "NOTE").write_text("a later commit\n", encoding="utf-8")
    subprocess.run(["git", "add", "NOTE"], cwd=source, check=True)
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "later"],
        cwd=source,
        check=True,
    )
    later = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=source, capture_output=True, text=True, check=True
    ).stdout.strip()
    _edit(camp.root, "base_commit", later)
    logs = {p: p.read_bytes() for p in camp.logs_dir.iterdir()}
    code, out = run_cli([*root, "status"], capsys)
    assert code == 5 and "chain integrity: BROKEN" in out and "base_commit" in out, out
    argv = [*root, "validate", "--round", "2", "--hypothesis", "h", "--patch", str(PATCH)]
    code, out = run_cli(argv, capsys)
    assert code == 5 and "identity" in out, out
    assert not camp.round_dir(2).exists()
    code, out = run_cli([*root, "set", "pairs", "4", "--reason", "r"], capsys)
    assert code == 5 and "identity" in out, out
    assert {p: p.read_bytes() for p in camp.logs_dir.iterdir()} == logs


def test_a_base_that_is_no_ancestor_of_the_head_is_not_linear(tmp_path: Path) -> None:
    source = committed_repo(tmp_path / "src")
    first = git(source, "rev-parse", "HEAD").strip()
    git(source, "checkout", "-q", "--orphan", "other")
    git(source, "commit", "-qm", "unrelated")
    lineage = Lineage(source, "c", None)
    lineage.start(git(source, "rev-parse", "HEAD").strip())
    with pytest.raises(InfrastructureError, match="not an ancestor"):
        lineage.linear_history(first)
