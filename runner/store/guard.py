"""Checks before work (docs/reliability.md): every command that appends to a campaign
(baseline, validate, accept, report) first clears what a killed command left behind,
finishes an interrupted lineage update, verifies every append-only file against
its ledger and the manifest's gate fields against theirs (``runner.store.gate_ledger``),
before it measures anything.  A broken record or a gate field changed without
``campaign set`` stops it with exit 5.

``check_records`` is also what ``campaign status`` reports, by file and byte range.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

from runner.core.errors import AppendOnlyViolation, CampaignError, RoundOutOfOrder
from runner.core.outcomes import Status
from runner.store.appendlog import LEDGER_SUFFIX, verify
from runner.store.campaign import Campaign
from runner.store.gate_ledger import verify_gate_fields
from runner.store.leftovers import clean_leftovers
from runner.store.lineage import Lineage
from runner.store.log_format import optimize_title, trend_header
from runner.store.manifest import branch_name

RECOVERY = (
    "restore each file named above to its recorded "
    "content (`git checkout`, a backup, or the bytes the ledger names), check it with "
    "`campaign status`, then append a correction with `campaign correct --text TEXT` "
    "instead of editing"
)
GATE_RECOVERY = (
    "for a gate field of manifest.yaml changed by hand: restore its ledgered value, or "
    "record the change with `campaign set FIELD VALUE --reason TEXT`; for any other "
    "file: " + RECOVERY
)


def record_files(campaign: Campaign) -> list[tuple[Path, str | None]]:
    """Every append-only file of the campaign with the header it must start with: the
    two logs, and any other file in ``logs/`` that has a ``.sha256`` ledger."""
    m = campaign.manifest
    files: list[tuple[Path, str | None]] = [
        (campaign.optimize_log, optimize_title(m)),
        (campaign.trend_log, trend_header(m)),
    ]
    known = {p for p, _ in files}
    for ledger in sorted(campaign.logs_dir.glob(f"*{LEDGER_SUFFIX}")):
        path = ledger.with_name(ledger.name.removesuffix(LEDGER_SUFFIX))
        if path not in known:
            files.append((path, None))
            known.add(path)
    return files


def check_records(campaign: Campaign) -> list[str]:
    """One line per append-only file that does not verify (empty: all intact)."""
    problems = []
    for path, prefix in record_files(campaign):
        if prefix is not None and not path.exists():
            problems.append(f"{path} is missing (with its ledger); restore it")
            continue
        try:
            verify(path, expected_prefix=prefix)
        except AppendOnlyViolation as exc:
            problems.append(str(exc))
        except (OSError, UnicodeDecodeError) as exc:
            problems.append(f"{path} cannot be read ({exc}); restore it")
    return problems


def verify_records(campaign: Campaign) -> None:
    """Raise AppendOnlyViolation (exit 5) naming every broken record."""
    problems = check_records(campaign)
    if problems:
        listed = "\n".join(f"  - {p}" for p in problems)
        raise AppendOnlyViolation(
            f"campaign {campaign.name}: {len(problems)} append-only record(s) do not "
            f"verify:\n{listed}\nNothing was measured or written: {RECOVERY}"
        )


def lineage_behind(campaign: Campaign) -> str | None:
    """In words: a round closed ACCEPTED whose lineage head was not moved yet (killed
    between the records and the ref update); None when the head is where it belongs."""
    found = _behind(campaign)
    if found is None:
        return None
    n, commit, head = found
    return (
        f"round-{n} closed ACCEPTED but the lineage head is still its parent {head[:12]} "
        f"(interrupted before the ref update); the next baseline/validate/accept/report "
        f"moves it to {commit[:12]}"
    )


def _behind(campaign: Campaign) -> tuple[int, str, str] | None:
    kept = [r for r in campaign.results() if r.status is Status.ACCEPTED and r.commit]
    if not kept:
        return None
    last = max(kept, key=lambda r: r.round)
    m = campaign.manifest
    lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
    head = lineage.head()
    commit = last.commit or ""
    if head == commit or lineage.parent(commit) != head:
        return None
    return last.round, commit, head


def finish_lineage(campaign: Campaign) -> str | None:
    """Move the lineage head of an interrupted ACCEPTED round.  Returns what was done."""
    found = _behind(campaign)
    if found is None:
        return None
    n, commit, head = found
    m = campaign.manifest
    Lineage(Path(m.source), campaign.name, branch_name(m)).advance(
        commit, head, move_branch=m.git_commit
    )
    return f"moved the lineage head to round-{n}'s commit {commit[:12]} (interrupted)"


def preflight(campaign: Campaign, progress: Callable[[str], None] | None = None) -> None:
    """Under the campaign lock, before any work: refuse a copied or moved folder
    (``Campaign.check_home``), clear leftovers, finish the lineage, verify every
    append-only record."""
    campaign.check_home()
    m = campaign.manifest
    done = clean_leftovers(campaign.root, campaign.name, Path(m.source))
    try:
        moved = finish_lineage(campaign)
    except CampaignError:
        moved = None  # no lineage yet (before the baseline), or broken: reported later
    if moved:
        done.append(moved)
    for line in done:
        if progress is not None:
            progress(f"cleanup: {line}")
    verify_records(campaign)
    verify_gate_fields(campaign)


@contextlib.contextmanager
def locked(campaign: Campaign, progress: Callable[[str], None] | None = None) -> Iterator[None]:
    """What every command that writes records does first: the campaign lock, then
    ``preflight``, before any request is checked."""
    with campaign.lock():
        preflight(campaign, progress)
        yield


def require_baseline(campaign: Campaign) -> None:
    """Refuse a command that needs the BASELINE (round-1) before it is closed."""
    if 1 not in campaign.closed_rounds():
        raise RoundOutOfOrder(f"campaign {campaign.name} has no baseline: run `campaign baseline`")
