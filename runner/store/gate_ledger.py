"""What steers the gate is ledgered (docs/reliability.md §7 row 3).

The manifest fields the verdict depends on (``GATE_FIELDS``: sigma_G, the primary
metric, the shape set and every list of shapes, the pairs, the timing, the cache mode,
the CSV schema and pinned header, the performance target, the kernel scope and the
focused test) are fixed at the baseline: their values and a sha256 over them are
appended to ``logs/gate_fields.jsonl``, an append-only record with its ``.sha256``
ledger like the two logs (``runner.store.appendlog``; ``guard.record_files`` picks it
up, so an edit to the file itself is a broken record).  The gate's own thresholds (2%,
3 sigma_G, 5%, 1%) are constants of ``runner.judge.gate``, not manifest fields; the
manifest's sigma_G is what moves them.

``check_gate_fields`` compares the manifest with the last entry: a field that differs
is named (recorded value, value now); ``campaign status`` says BROKEN and every command
that measures (``guard.preflight``) refuses with exit 5 before it measures.  A
deliberate change goes through ``campaign set FIELD VALUE --reason TEXT``
(``runner.flow.settings.set_gate_field``), which appends a new entry and a marked
line to optimize.md.

A campaign made before this (no ledger, and a baseline that does not say it ledgered
its fields) keeps working: ``describe`` says "not ledgered"; its first ``campaign set``
starts the ledger.  A ledger that was deleted (together with its ``.sha256``) while
the baseline's record says it was written is BROKEN too.

The gate's own constants (``runner.judge.gate_constants``: thresholds, the near-noise
rule, the vetoes, the measuring caps) are ledgered beside the fields: every entry holds
their name=value map and its digest (``constants``).  Running code whose constants
differ (a turbo-campaign upgrade that changed the gate) is named like a changed field:
status BROKEN, exit 5 before measuring, naming each constant and
``campaign set gate_constants current --reason TEXT``, which records the running
code's constants as the campaign's.  An entry without them (a campaign made before) says
"not ledgered" for the constants; the next ``campaign set`` ledgers them.

The campaign's identity (``identity``: the base commit every round is judged against,
the source checkout, the lineage ref and the optimisation branch) is ledgered in every
entry too: a hand edit of ``base_commit`` (or of what names the lineage) in
manifest.yaml is BROKEN like a changed gate field (exit 5 before measuring).  It is
never ``campaign set``; ``campaign relocate`` records a moved source as a new entry.
An entry written before has no identity and is not checked for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import TypedDict

from runner.core.errors import AppendOnlyViolation
from runner.core.outcomes import Status
from runner.core.timestamps import now_minute
from runner.judge.gate_constants import changed_names, digest, gate_constants
from runner.store.appendlog import append
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest, branch_name

LEDGER_NAME = "gate_fields.jsonl"


class LedgeredConstants(TypedDict):
    """The gate constants an entry ledgered: their digest and their values."""

    sha256: str
    values: dict[str, object]


class LedgerEntry(TypedDict, total=False):
    """One line of the ledger (``record``); ``identity`` and ``constants`` are missing
    from an entry written before they were ledgered."""

    when: str
    by: str
    reason: str
    sha256: str
    fields: dict[str, object]
    identity: dict[str, str | None]
    constants: LedgeredConstants


GATE_FIELDS = (
    "primary_metric",
    "sigma_g",
    "shape_set",
    "target_shapes",
    "representative_shapes",
    "heldout_shapes",
    "heldout_digest",
    "heldout_count",
    "pairs",
    "timing",
    "cache_mode",
    "csv_schema",
    "pinned_header",
    "performance_target",
    "kernel_source",
    "test_command",
)
# A sealed held-out pick's fields (runner.store.sealed), ledgered only when sealed: the
# ledger of a campaign made before the seal stays valid.
SEALED_FIELDS = ("heldout_digest", "heldout_count")
# `campaign set gate_constants current`: the running code's gate constants become the
# campaign's (the only VALUE it takes).
CONSTANTS_FIELD = "gate_constants"
CONSTANTS_VALUE = "current"
# Fields of the loop, not of the verdict: `campaign set` records their change in
# optimize.md, never in the gate ledger (``max_iterations``: T3 of docs/protocol.md §7.2).
LOOP_FIELDS = ("max_iterations",)
SETTABLE = (*(f for f in GATE_FIELDS if f not in SEALED_FIELDS), CONSTANTS_FIELD, *LOOP_FIELDS)
CONSTANTS_SET = f"`campaign set {CONSTANTS_FIELD} {CONSTANTS_VALUE} --reason TEXT`"
# How the problem line of changed constants starts (``constant_problems``).
CONSTANTS_PROBLEM = "the gate's constants of this turbo-campaign differ"
CONSTANTS_RECOVERY = (
    "for the gate's constants: run the turbo-campaign version that made the campaign, "
    f"or record the change with {CONSTANTS_SET}"
)
# The words the baseline's record carries when it wrote the ledger.
LEDGERED_NOTE = "gate fields ledgered in logs/" + LEDGER_NAME


def ledger_file(campaign: Campaign) -> Path:
    return campaign.logs_dir / LEDGER_NAME


def gate_values(m: Manifest) -> dict[str, object]:
    data = m.model_dump(mode="json")
    skip = SEALED_FIELDS if m.heldout_digest is None else ()
    return {k: data[k] for k in GATE_FIELDS if k not in skip}


def identity_values(m: Manifest) -> dict[str, str | None]:
    """What names the campaign's history: the base commit, the source checkout, the
    lineage ref and the optimisation branch."""
    return {
        "base_commit": m.base_commit,
        "source": m.source,
        "lineage_ref": f"refs/campaigns/{m.campaign_name}/head",
        "branch": branch_name(m) if m.git_commit else None,
    }


CHECKED_IDENTITY = ("base_commit", "lineage_ref", "branch")


def identity_problems(campaign: Campaign, entry: LedgerEntry) -> list[str]:
    """One line naming every identity value that differs from the entry's (empty: the
    same, or an entry written before the identity was ledgered)."""
    recorded = entry.get("identity")
    if not isinstance(recorded, dict):
        return []
    now = identity_values(campaign.manifest)
    changed = [k for k in CHECKED_IDENTITY if recorded.get(k) != now[k]]
    if not changed:
        return []
    listed = "; ".join(
        f"{k} {short_value(recorded.get(k))} -> {short_value(now[k])}" for k in changed
    )
    return [
        f"{campaign.manifest_path}: the campaign's identity ({', '.join(changed)}) changed "
        f"since it was ledgered ({listed}); restore the ledgered value(s) in manifest.yaml "
        "(the base commit and the lineage are fixed for the campaign's life)"
    ]


def values_sha(values: Mapping[str, object]) -> str:
    text = json.dumps(values, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record(campaign: Campaign, by: str, reason: str) -> str:
    """Append the manifest's gate fields as the new ledgered state; returns its sha256."""
    values = gate_values(campaign.manifest)
    sha = values_sha(values)
    constants = gate_constants()
    entry: LedgerEntry = {
        "when": now_minute(),
        "by": by,
        "reason": reason,
        "sha256": sha,
        "fields": values,
        "identity": identity_values(campaign.manifest),
        "constants": {"sha256": digest(constants), "values": constants},
    }
    append(ledger_file(campaign), json.dumps(entry, sort_keys=True, ensure_ascii=True) + "\n")
    return sha


def last_entry(campaign: Campaign) -> LedgerEntry | None:
    """The last ledgered state; None when there is no ledger.  A line that is not an
    entry is an AppendOnlyViolation (the file's own ledger catches an edit first)."""
    path = ledger_file(campaign)
    if not path.exists():
        return None
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    try:
        entry: LedgerEntry | None = json.loads(lines[-1]) if lines else None
    except json.JSONDecodeError:
        entry = None
    if not isinstance(entry, dict) or not isinstance(entry.get("fields"), dict):
        raise AppendOnlyViolation(f"{path}: its last line is not a gate-fields entry; restore it")
    return entry


def _baseline_ledgered(campaign: Campaign) -> bool:
    if 1 not in campaign.closed_rounds():
        return False
    base = campaign.load_result(1)
    return base.status is Status.BASELINE and any(LEDGERED_NOTE in r for r in base.reasons)


def short_value(value: object) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= 80 else text[:77] + "..."


def ledgered_constants(entry: LedgerEntry) -> LedgeredConstants | None:
    """The entry's gate constants (``sha256``, ``values``); None when the entry was
    written before they were ledgered."""
    found = entry.get("constants")
    if isinstance(found, dict) and isinstance(found.get("values"), dict):
        return found
    return None


def constant_problems(entry: LedgerEntry) -> list[str]:
    """One line naming every gate constant of the running code that differs from the
    entry's (empty: the same, or not ledgered)."""
    recorded = ledgered_constants(entry)
    if recorded is None:
        return []
    now = gate_constants()
    if digest(now) == recorded.get("sha256") == digest(recorded["values"]):
        return []
    names = changed_names(recorded["values"], now)
    listed = "; ".join(
        f"{k} {short_value(recorded['values'].get(k))} -> {short_value(now.get(k))}" for k in names
    )
    return [
        f"{CONSTANTS_PROBLEM} from those the campaign was judged with "
        f"(sha256 {str(recorded.get('sha256'))[:12]} -> {digest(now)[:12]}): "
        f"{', '.join(names) or '(hash)'} ({listed}); run the turbo-campaign version that "
        f"made the campaign, or record the change with {CONSTANTS_SET}"
    ]


def field_problems(campaign: Campaign) -> list[str]:
    """One line naming every gate field that differs from its ledgered value (empty:
    ledgered and unchanged, or not ledgered at all)."""
    try:
        entry = last_entry(campaign)
    except (AppendOnlyViolation, OSError, UnicodeDecodeError) as exc:
        return [str(exc)]
    if entry is None:
        if _baseline_ledgered(campaign):
            return [
                f"{ledger_file(campaign)} is missing but the baseline recorded it "
                "(deleted with its ledger); restore it from a backup"
            ]
        return []
    recorded, now = entry["fields"], gate_values(campaign.manifest)
    changed = [k for k in GATE_FIELDS if recorded.get(k) != now.get(k)]
    identity = identity_problems(campaign, entry)
    if not changed and values_sha(now) == entry.get("sha256"):
        return identity
    listed = "; ".join(
        f"{k} {short_value(recorded.get(k))} -> {short_value(now.get(k))}" for k in changed
    )
    return [
        *identity,
        f"{campaign.manifest_path}: gate field(s) {', '.join(changed) or '(hash)'} changed "
        f"since they were ledgered ({listed}); restore the ledgered value(s) in "
        "manifest.yaml, or record a deliberate change with "
        "`campaign set FIELD VALUE --reason TEXT`",
    ]


def check_gate_fields(campaign: Campaign) -> list[str]:
    """``field_problems``, and one line for the gate's constants when the running
    code's differ from the campaign's."""
    problems = field_problems(campaign)
    try:
        entry = last_entry(campaign)
    except (AppendOnlyViolation, OSError, UnicodeDecodeError):
        return problems  # named by field_problems
    return problems + ([] if entry is None else constant_problems(entry))


def verify_gate_fields(campaign: Campaign) -> None:
    """Raise AppendOnlyViolation (exit 5) when a gate field differs from the ledger."""
    problems = check_gate_fields(campaign)
    if problems:
        raise AppendOnlyViolation(
            f"campaign {campaign.name}: what steers the gate changed without a record:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\nNothing was measured or written."
        )


def describe(campaign: Campaign) -> str:
    """The status line: ledgered (its hash and entries), not ledgered, or BROKEN."""
    if field_problems(campaign):
        return "BROKEN: changed without `campaign set` (named under chain integrity)"
    entry = last_entry(campaign)
    if entry is None:
        return (
            "not ledgered (a campaign made before the gate fields were ledgered, or no "
            "baseline yet)"
        )
    return f"ledgered, unchanged (sha256 {str(entry.get('sha256'))[:12]}, by {entry.get('by')})"


def describe_constants(campaign: Campaign) -> str:
    """The status line of the gate's constants: ledgered and the running code's, not
    ledgered, or BROKEN (the running code judges with other constants)."""
    try:
        entry = last_entry(campaign)
    except (AppendOnlyViolation, OSError, UnicodeDecodeError):
        return "BROKEN: the gate-field ledger does not verify (named under chain integrity)"
    recorded = None if entry is None else ledgered_constants(entry)
    if entry is None or recorded is None:
        return (
            "not ledgered (a campaign made before the gate's constants were ledgered, or "
            f"no baseline yet; {CONSTANTS_SET} ledgers them)"
        )
    if constant_problems(entry):
        return (
            "BROKEN: this turbo-campaign judges with other constants than the campaign's "
            "(named under chain integrity)"
        )
    return f"ledgered, the running code's (sha256 {str(recorded.get('sha256'))[:12]})"
