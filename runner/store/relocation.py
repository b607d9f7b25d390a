"""``campaign relocate``: point a copied or moved campaign folder at its own source
checkout, as a deliberate, recorded change (``Campaign.check_home`` refuses such a
folder until then).

The manifest's ``source``, ``campaign_dir`` and a ``quick_command`` that names the old
folder are rewritten; a marked entry is appended to ``logs/optimize.md`` (through
``appendlog``, after every record verifies) saying what moved where.  The new source
must be a git work tree holding the base commit and, once there is a baseline, the
campaign's lineage head (``refs/campaigns/<name>/head``).
"""

from __future__ import annotations

from pathlib import Path

from runner.core.errors import AppendOnlyViolation, ConfigError
from runner.core.processes import run
from runner.store.appendlog import append_note
from runner.store.campaign import Campaign
from runner.store.gate_ledger import field_problems, last_entry, record
from runner.store.guard import verify_records
from runner.store.lineage import Lineage
from runner.store.manifest import validate_manifest


def _toplevel(source: Path) -> Path:
    proc = run(["git", "-C", str(source), "rev-parse", "--show-toplevel"], check=False)
    if not source.is_dir() or proc.returncode != 0:
        raise ConfigError(
            f"--source {source} is not a git work tree; pass the checkout this campaign "
            "should run in (a clone of the original source, with its lineage)"
        )
    return Path(proc.stdout.strip()).resolve()


def _check_lineage(campaign: Campaign, source: Path) -> None:
    """The new source holds the base commit and, after a baseline, the lineage head."""
    lineage = Lineage(source, campaign.name, None)
    lineage.resolve(campaign.manifest.base_commit or "HEAD")
    if campaign.closed_rounds():
        lineage.head()  # ConfigError when the ref is missing


def relocate(campaign: Campaign, source: Path) -> str:
    """Rewrite the folder's source and home (see the module doc); returns the entry
    appended to optimize.md."""
    new_source = _toplevel(Path(source).resolve())
    with campaign.lock():
        verify_records(campaign)
        problems = field_problems(campaign)
        if problems:
            raise AppendOnlyViolation("\n".join(problems) + "\nNothing was relocated.")
        try:
            _check_lineage(campaign, new_source)
        except ConfigError as exc:
            raise ConfigError(
                f"{exc}; relocate to the checkout that carries this campaign's lineage "
                f"(fetch it from the original: git -C {new_source} fetch ORIGINAL "
                "'+refs/campaigns/*:refs/campaigns/*')"
            ) from None
        m = campaign.manifest
        old_dir = m.campaign_dir or "(not recorded)"
        data = m.model_dump()
        data.update(source=str(new_source), campaign_dir=str(campaign.root))
        if m.campaign_dir and m.campaign_dir in m.quick_command:
            data["quick_command"] = m.quick_command.replace(m.campaign_dir, str(campaign.root))
        entry = (
            f"relocated: campaign folder {old_dir} -> {campaign.root}; "
            f"source {m.source} -> {new_source} (`campaign relocate`)"
        )
        append_note(campaign.optimize_log, entry, "CAMPAIGN RELOCATED")
        campaign.manifest = validate_manifest(data, "campaign relocate")
        campaign.save_manifest()
        if last_entry(campaign) is not None:
            record(campaign, "campaign relocate", entry)  # the new source is its identity
    return entry
