"""Issue 27 row 3: what steers the gate is ledgered.  The fields the verdict depends on
are fixed at the baseline (``logs/gate_fields.jsonl``); a hand edit of manifest.yaml
breaks the chain (status BROKEN naming the field, validate exit 5 before measuring),
``campaign set`` records a deliberate change, and a campaign made before keeps working
("not ledgered")."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from campaign_helpers import run_cli

from runner.flow.new_campaign import EXAMPLES_DIR
from runner.flow.settings import parse_value
from runner.store.campaign import Campaign
from runner.store.gate_ledger import LEDGER_NAME, LEDGERED_NOTE, gate_sha

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
    before = gate_sha(camp.manifest)
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
    assert last["sha256"] == gate_sha(again.manifest) != before
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
# The modules whose module-level numeric constants decide a verdict or how long a
# comparison measures before it is final (the gate, the near-noise rule, the vetoes,
# the measuring caps): a constant added, removed or changed there fails the test below
# until docs/gate-constants.jsonl records it (docs/protocol.md §5.3).
GATE_MODULES = (
    "runner.judge.gate",
    "runner.judge.evidence",
    "runner.judge.gate_inputs",
    "runner.judge.heldout",
    "runner.judge.vetoes",
    "runner.flow.measure",
)
CONSTANTS_LEDGER = Path(__file__).resolve().parent.parent / "docs" / "gate-constants.jsonl"


def _numeric(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, dict):
        return bool(value) and all(_numeric(v) for v in value.values())
    if isinstance(value, tuple | list):
        return bool(value) and all(_numeric(v) for v in value)
    return False


def gate_constants() -> dict[str, object]:
    """Every numeric constant the gate modules define (imported names aside), and the
    threshold and pair rules at a grid of sigma_G (their literals: 3 sigma_G, 3 pairs)."""
    import importlib

    from runner.judge.gate import accept_threshold, required_pairs

    found: dict[str, object] = {}
    for name in GATE_MODULES:
        module = importlib.import_module(name)
        source = Path(str(module.__file__)).read_text(encoding="utf-8")
        for key, value in vars(module).items():
            defined = re.search(rf"(?m)^{key}\s*(:[^=]*)?=", source)
            if key.isupper() and defined and _numeric(value):
                found[f"{name}.{key}"] = json.loads(json.dumps(value))
    sigmas = (0.0, 0.005, 0.01, 0.011, 0.02, 0.05)
    found["accept_threshold(sigma_g)"] = {str(s): accept_threshold(s) for s in sigmas}
    found["required_pairs(sigma_g)"] = {str(s): required_pairs(s) for s in sigmas}
    return found


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
    changed = sorted(k for k in now.keys() | recorded.keys() if now.get(k) != recorded.get(k))
    text = json.dumps(now, sort_keys=True, separators=(",", ":"))
    line = json.dumps({"when": "YYYY-MM-DD", "why": "WHY", "constants": now,
                       "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest()},
                      sort_keys=True)  # fmt: skip
    assert not changed, (
        f"gate constants changed without a record: {', '.join(changed)}; append this line "
        f"to {CONSTANTS_LEDGER.name} (with the date and why) and a CHANGELOG note:\n{line}"
    )
