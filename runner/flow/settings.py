"""``campaign set FIELD VALUE --reason TEXT``: a deliberate change of one field the
verdict depends on (or ``campaign set gate_constants current``: the running code's gate
constants become the campaign's), recorded (a new gate-field ledger entry, a marked line in
optimize.md) after every record verifies (docs/reliability.md §7, row 3).  The ledger
itself and its checks are ``runner.store.gate_ledger``.
"""

from __future__ import annotations

import shlex

from runner.core.errors import AppendOnlyViolation, ConfigError, ValueRefused
from runner.core.limits import MAX_NOTE_CHARS, check_size, excerpt
from runner.core.shapes import SHAPE_SETS
from runner.judge.gate_constants import current_digest
from runner.store.appendlog import append_note
from runner.store.campaign import Campaign
from runner.store.gate_ledger import (
    CONSTANTS_FIELD,
    CONSTANTS_VALUE,
    GATE_FIELDS,
    LOOP_FIELDS,
    SETTABLE,
    LedgerEntry,
    constant_problems,
    field_problems,
    gate_values,
    identity_problems,
    last_entry,
    ledgered_constants,
    record,
    short_value,
)
from runner.store.guard import verify_records
from runner.store.manifest import Manifest, validate_manifest
from runner.store.yaml_input import load_yaml

SETTING_CHANGED = "SETTING CHANGED"  # the heading of a `campaign set` entry in optimize.md


def parse_value(text: str) -> object:
    """A VALUE of ``campaign set``: YAML (``0.05``, ``[a, b, c]``, ``Forward TFLOPS``);
    a percentage ``5%`` is a fraction (sigma_g)."""
    stripped = text.strip()
    if stripped.endswith("%"):
        try:
            return float(stripped[:-1]) / 100
        except ValueError:
            pass
    return load_yaml(stripped, f"VALUE {excerpt(text)}")


# Fields whose VALUE is taken as typed: a YAML read would drop what follows " #".
VERBATIM_FIELDS = ("test_command",)


def check_setting(campaign: Campaign, field: str, new: Manifest) -> None:
    """What a valid manifest may hold but no round of this campaign can use: an unknown
    shape set, a pinned header without the schema's columns, representative shapes
    emptied after the baseline, a test command cut by a shell comment.  ValueRefused
    (exit 2) saying what to give; nothing is changed."""
    problem = _setting_problem(campaign, field, new)
    if problem:
        raise ValueRefused(f"campaign set {field}: {problem}; nothing was changed")


def _setting_problem(campaign: Campaign, field: str, new: Manifest) -> str | None:
    if field == "shape_set":
        if new.shape_set not in SHAPE_SETS:
            known = ", ".join(sorted(SHAPE_SETS))
            return f"unknown shape set {excerpt(new.shape_set)}; give one of {known}"
    elif field == "pinned_header" and new.pinned_header is not None:
        columns = new.pinned_header.split(",")
        if not {"label", "Check"} <= set(columns) or new.primary_metric not in columns:
            return (
                f"the header {excerpt(new.pinned_header)} lacks the columns 'label', 'Check' "
                f"or {new.primary_metric!r}; give the benchmark CSV's first line as it is"
            )
    elif field == "representative_shapes" and 1 in campaign.closed_rounds():
        if not new.representative_shapes:
            return "after the baseline the representative shapes are 3-5 labels of its PASS rows"
    elif field == "test_command":
        return _command_problem(new.test_command)
    return None


def _command_problem(command: str) -> str | None:
    """A shell command whose words a ``#`` comment cuts, or that does not split."""
    try:
        whole, cut = shlex.split(command), shlex.split(command, comments=True)
    except ValueError as exc:
        return f"{excerpt(command)} does not split into words ({exc}): close its quotes"
    if not cut:
        return "give the focused test's command (it is empty)"
    if whole != cut:
        return (
            f"{excerpt(command)} holds a shell comment (' #'): the shell runs only "
            f"{excerpt(' '.join(cut))}; drop the comment or quote the '#'"
        )
    return None


def _check_others(campaign: Campaign, field: str, entry: LedgerEntry | None) -> None:
    """Refuse while another gate field, or the gate's constants, differ from the
    ledger: each is restored or set on its own, never ledgered on the side."""
    if entry is None:
        return
    now = gate_values(campaign.manifest)
    others = [k for k in GATE_FIELDS if k != field and entry["fields"].get(k) != now.get(k)]
    if field != CONSTANTS_FIELD and constant_problems(entry):
        others.append(f"{CONSTANTS_FIELD} (the running code's differ)")
    if identity_problems(campaign, entry):
        others.append("the campaign's identity (base_commit, source or lineage)")
    if others:
        raise AppendOnlyViolation(
            f"gate field(s) {', '.join(others)} of {campaign.manifest_path} differ "
            "from their ledgered values too: restore them, or set each with its "
            "own `campaign set FIELD VALUE --reason TEXT`; nothing was changed"
        )


def _constants_line(campaign: Campaign, value: str, entry: LedgerEntry | None) -> str:
    """``campaign set gate_constants current``: the line for optimize.md (the ledger
    entry that follows holds the running code's constants)."""
    if value.strip() != CONSTANTS_VALUE:
        raise ConfigError(
            f"`campaign set {CONSTANTS_FIELD}` takes one VALUE, {CONSTANTS_VALUE!r}: the "
            "constants of the turbo-campaign that runs it become the campaign's"
        )
    if field_problems(campaign):
        raise AppendOnlyViolation(
            f"{campaign.manifest_path}: a gate field differs from its ledgered value; "
            "restore it or set it with `campaign set FIELD VALUE --reason TEXT` first; "
            "nothing was changed"
        )
    recorded = None if entry is None else ledgered_constants(entry)
    old = "not ledgered" if recorded is None else str(recorded.get("sha256"))[:12]
    return f"gate constants: {old} -> {current_digest()[:12]} (`campaign set`)"


def _set_loop_field(campaign: Campaign, field: str, value: str, reason: str) -> str:
    """A field of the loop (``max_iterations``): validated, saved, and its change
    appended to optimize.md; the gate ledger is not touched (the verdict does not
    depend on it)."""
    m = campaign.manifest
    data = m.model_dump()
    old = data.get(field)
    data[field] = parse_value(value)
    new = validate_manifest(data, f"campaign set {field}")
    line = f"loop field {field}: {old} -> {getattr(new, field)} (`campaign set`); reason: {reason}"
    append_note(campaign.optimize_log, line, SETTING_CHANGED)
    campaign.manifest = new
    campaign.save_manifest()
    return line


def set_gate_field(campaign: Campaign, field: str, value: str, reason: str) -> str:
    """``campaign set``: change one gate field (or take the running code's gate
    constants) as a recorded, deliberate change.  Refused while a record does not
    verify or another gate field differs from its ledgered value (that one must be
    restored or set on its own first).  Returns the line appended to optimize.md."""
    if field not in SETTABLE:
        raise ValueRefused(f"{field!r} is not a gate field; one of: {', '.join(SETTABLE)}")
    if not reason.strip():
        raise ConfigError("say why the field changes: --reason TEXT (it is recorded)")
    check_size(reason, MAX_NOTE_CHARS, "--reason", "say why in a few sentences")
    with campaign.lock():
        verify_records(campaign)
        if field in LOOP_FIELDS:
            return _set_loop_field(campaign, field, value, reason.strip())
        entry = last_entry(campaign)
        _check_others(campaign, field, entry)
        if field == CONSTANTS_FIELD:
            line = _constants_line(campaign, value, entry) + f"; reason: {reason.strip()}"
            append_note(campaign.optimize_log, line, SETTING_CHANGED)
            record(campaign, "campaign set", f"{field}: {reason.strip()}")
            return line
        m = campaign.manifest
        old = gate_values(m)[field] if entry is None else entry["fields"][field]
        data = m.model_dump()
        data[field] = value.strip() if field in VERBATIM_FIELDS else parse_value(value)
        new = validate_manifest(data, f"campaign set {field}")
        check_setting(campaign, field, new)
        line = (
            f"gate field {field}: {short_value(old)} "
            f"-> {short_value(gate_values(new)[field])} (`campaign set`); reason: {reason.strip()}"
        )
        append_note(campaign.optimize_log, line, SETTING_CHANGED)
        campaign.manifest = new
        campaign.save_manifest()
        record(campaign, "campaign set", f"{field}: {reason.strip()}")
    return line
