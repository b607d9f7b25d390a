"""Append-only files (docs/protocol.md §6.4: nothing is ever deleted or rewritten).

Every append goes through ``append``: it first checks that the file still begins
with everything written before, then writes the whole new content to a temporary
file in the same directory, fsyncs it and renames it over the old one, and finally
records the new length and sha256 in a sidecar ledger ``<file>.sha256`` (one line
per append: ``<byte length> <sha256 hex>``).  The check: the first L bytes of the
file hash to the ledger's last entry (L its length).  An edit, a truncation or a
rewrite raises ``AppendOnlyViolation``; the fix is to restore the file and append a
correction (``append_correction``, which ``campaign correct`` calls).

An interrupted append leaves either the old file or the new one (``os.replace`` is
atomic); if it stopped between the rename and the ledger update, the ledger's last
entry is a prefix of the file, which still verifies.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import AppendOnlyViolation
from runner.core.escape import md_text
from runner.core.files import write_atomic
from runner.core.timestamps import now_minute

LEDGER_SUFFIX = ".sha256"


@dataclass(frozen=True)
class LedgerEntry:
    length: int
    sha256: str


def ledger_path(path: Path) -> Path:
    return path.with_name(path.name + LEDGER_SUFFIX)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_ledger(path: Path) -> list[LedgerEntry]:
    """The ledger of ``path`` (empty when there is none)."""
    lp = ledger_path(path)
    if not lp.exists():
        return []
    entries = []
    for n, line in enumerate(lp.read_text(encoding="ascii").splitlines(), 1):
        parts = line.split()
        if len(parts) != 2 or not parts[0].isdigit() or len(parts[1]) != 64:
            raise AppendOnlyViolation(
                f"{lp} line {n} is not '<length> <sha256>': the ledger of {path} was edited; "
                "restore it from version control (never edit a ledger)"
            )
        entries.append(LedgerEntry(int(parts[0]), parts[1]))
    return entries


def _violation(path: Path, what: str, offset: str) -> AppendOnlyViolation:
    return AppendOnlyViolation(
        f"{path} is append-only but {what}{offset}; restore the file (e.g. `git checkout` "
        "or from a backup) and append a correction instead of editing "
        "(`campaign correct --text TEXT`)"
    )


def _diff_range(data: bytes, entries: list[LedgerEntry]) -> str:
    """Where the first difference lies, from the longest ledger prefix still intact."""
    good = 0
    for e in entries:
        if len(data) >= e.length and _sha(data[: e.length]) == e.sha256:
            good = e.length
    later = [e.length for e in entries if e.length > good]
    if not later:
        return f" (first difference at or after byte {good})"
    return f" (first difference between byte {good} and byte {min(later)})"


def _check(path: Path, data: bytes | None, entries: list[LedgerEntry]) -> None:
    if not entries:
        if data:
            raise _violation(
                path, f"has {len(data)} bytes and no ledger {ledger_path(path).name}", ""
            )
        return
    last = entries[-1]
    if data is None:
        raise _violation(path, "was deleted", "")
    if len(data) < last.length:
        where = _diff_range(data, entries)
        raise _violation(path, f"was truncated from {last.length} to {len(data)} bytes", where)
    if _sha(data[: last.length]) != last.sha256:
        raise _violation(path, "was edited or rewritten", _diff_range(data, entries))


def _check_prefix(path: Path, data: bytes, expected_prefix: str) -> None:
    want = expected_prefix.encode("utf-8")
    if data.startswith(want):
        return
    offset = next(
        (i for i, (a, b) in enumerate(zip(data, want, strict=False)) if a != b),
        min(len(data), len(want)),
    )
    raise _violation(
        path, "no longer starts with its header", f" (first difference at byte {offset})"
    )


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def verify(path: str | os.PathLike[str], *, expected_prefix: str | None = None) -> None:
    """Check ``path`` against its ledger (and ``expected_prefix``) without writing."""
    p = Path(path)
    data = _read(p)
    _check(p, data, read_ledger(p))
    if expected_prefix is not None:
        _check_prefix(p, data or b"", expected_prefix)


def append(path: str | os.PathLike[str], text: str, *, expected_prefix: str | None = None) -> None:
    """Append ``text`` to ``path`` (created when absent) after checking its history."""
    p = Path(path)
    data = _read(p)
    entries = read_ledger(p)
    _check(p, data, entries)
    if expected_prefix is not None and data is not None:
        _check_prefix(p, data, expected_prefix)
    new = (data or b"") + text.encode("utf-8")
    write_atomic(p, new)
    lines = "".join(f"{e.length} {e.sha256}\n" for e in entries)
    write_atomic(ledger_path(p), lines + f"{len(new)} {_sha(new)}\n")


def adopt(path: str | os.PathLike[str]) -> None:
    """Start the ledger of a file written without one (upstream's own tips.md): its
    bytes now are the history later appends must keep."""
    p = Path(path)
    if read_ledger(p) or not p.is_file():
        return
    data = p.read_bytes()
    write_atomic(ledger_path(p), f"{len(data)} {_sha(data)}\n")


def quoted(text: str) -> str:
    """``text`` as the lines of a markdown quote, each line data (``md_text``): a
    user's heading, list, table or link stays text inside the quote."""
    return "\n".join(
        f"> {md_text(line)}" if line.strip() else ">" for line in text.strip().splitlines()
    )


def render_correction(text: str, when: str | None = None) -> str:
    """A clearly marked correction block (markdown blockquote)."""
    stamp = when or now_minute()
    body = quoted(text)
    return (
        f"\n> **CORRECTION ({stamp})** — this corrects an entry above; the entry stays.\n{body}\n"
    )


def render_note(text: str, heading: str, when: str | None = None) -> str:
    """A marked block for a deliberate change that corrects nothing above it (``campaign
    set``: SETTING CHANGED, ``campaign relocate``: CAMPAIGN RELOCATED)."""
    stamp = when or now_minute()
    body = quoted(text)
    return f"\n> **{heading} ({stamp})** — a deliberate change, recorded.\n{body}\n"


def append_note(path: str | os.PathLike[str], text: str, heading: str) -> None:
    """Append a ``render_note`` block (a recorded change, not a correction)."""
    append(path, render_note(text, heading))


def append_correction(path: str | os.PathLike[str], text: str, *, when: str | None = None) -> None:
    """Append a correction entry (the only way to fix a wrong entry)."""
    append(path, render_correction(text, when))
