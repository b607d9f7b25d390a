"""``campaign set FIELD VALUE --reason TEXT``: a deliberate change of one field the
verdict depends on, recorded (a new gate-field ledger entry, a marked line in
optimize.md) after every record verifies (docs/reliability.md §7, row 3).  The ledger
itself and its checks are ``runner.store.gate_ledger``.
"""

from __future__ import annotations

from typing import Any

import yaml

from runner.core.errors import AppendOnlyViolation, ConfigError
from runner.store.appendlog import append_correction
from runner.store.campaign import Campaign
from runner.store.gate_ledger import GATE_FIELDS, gate_values, last_entry, record, short_value
from runner.store.guard import verify_records
from runner.store.manifest import validate_manifest


def parse_value(text: str) -> Any:
    """A VALUE of ``campaign set``: YAML (``0.05``, ``[a, b, c]``, ``Forward TFLOPS``);
    a percentage ``5%`` is a fraction (sigma_g)."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            return float(stripped[:-1]) / 100
        except ValueError:
            pass
    try:
        return yaml.safe_load(stripped)
    except yaml.YAMLError as exc:
        raise ConfigError(f"VALUE {text!r} is not a YAML value ({exc})") from None


def set_gate_field(campaign: Campaign, field: str, value: str, reason: str) -> str:
    """``campaign set``: change one gate field as a recorded, deliberate change.  Refused
    while a record does not verify or another gate field differs from its ledgered
    value (that one must be restored or set on its own first).  Returns the line
    appended to optimize.md."""
    if field not in GATE_FIELDS:
        raise ConfigError(f"{field!r} is not a gate field; one of: {', '.join(GATE_FIELDS)}")
    if not reason.strip():
        raise ConfigError("say why the field changes: --reason TEXT (it is recorded)")
    with campaign.lock():
        verify_records(campaign)
        m = campaign.manifest
        entry = last_entry(campaign)
        if entry is not None:
            others = [
                k for k in GATE_FIELDS if k != field and entry["fields"].get(k) != gate_values(m)[k]
            ]
            if others:
                raise AppendOnlyViolation(
                    f"gate field(s) {', '.join(others)} of {campaign.manifest_path} differ "
                    "from their ledgered values too: restore them, or set each with its "
                    "own `campaign set FIELD VALUE --reason TEXT`; nothing was changed"
                )
        old = gate_values(m)[field] if entry is None else entry["fields"][field]
        data = m.model_dump()
        data[field] = parse_value(value)
        new = validate_manifest(data, f"campaign set {field}")
        line = (
            f"gate field {field}: {short_value(old)} "
            f"-> {short_value(gate_values(new)[field])} (`campaign set`); reason: {reason.strip()}"
        )
        append_correction(campaign.optimize_log, line)
        campaign.manifest = new
        campaign.save_manifest()
        record(campaign, "campaign set", f"{field}: {reason.strip()}")
    return line
