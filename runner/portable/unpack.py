"""Unpacking a bundle: checked member by member before anything is written.

A first pass streams the archive without writing: every header (one top folder, plain
files and folders only, no absolute or ``..`` path, no name twice) and every size
against ``runner.core.limits`` (a member, all of them together, their count), each
file hashed as it streams by, and the checksum listing read.  A header over a limit
stops the pass at once (a gzip bomb is never inflated whole), and the hashes must
equal the listing's, file for file.  Only then the second pass writes, hashing again,
and a file that differs (the archive changed in between) removes all it wrote.  A
truncated or corrupt archive is bad input (``BundleError``, exit 2).
"""

from __future__ import annotations

import shutil
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from runner.core.errors import BundleError
from runner.core.files import sha256_stream
from runner.core.limits import (
    MAX_BUNDLE_MEMBER_BYTES,
    MAX_BUNDLE_MEMBERS,
    MAX_BUNDLE_TOTAL_BYTES,
)
from runner.portable.checksums import check_listing, read_listing

# What a damaged archive raises while it streams (a truncated gzip is an EOFError).
_UNREADABLE = (tarfile.TarError, OSError, EOFError, zlib.error)


def _members(tar: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    member = tar.next()
    while member is not None:
        yield member
        member = tar.next()


def _check_header(bundle: Path, m: tarfile.TarInfo, seen: dict[str, str], total: int) -> int:
    """Refuse an unsafe or oversized header; returns the running total of bytes."""
    parts = Path(m.name).parts
    if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()) or not parts:
        raise BundleError(f"{bundle} holds an unsafe entry {m.name!r}; refusing to extract")
    if m.name.rstrip("/") in seen:
        raise BundleError(f"{bundle} holds {m.name!r} twice: it was altered; re-export it")
    if len(seen) >= MAX_BUNDLE_MEMBERS:
        raise BundleError(f"{bundle} holds over {MAX_BUNDLE_MEMBERS:,} entries: not a bundle")
    if m.size > MAX_BUNDLE_MEMBER_BYTES or total + m.size > MAX_BUNDLE_TOTAL_BYTES:
        raise BundleError(
            f"{bundle}: {m.name!r} declares {m.size:,} bytes; a bundle holds at most "
            f"{MAX_BUNDLE_MEMBER_BYTES:,} bytes a file and {MAX_BUNDLE_TOTAL_BYTES:,} in "
            "all (a campaign's records are far smaller): it was not made by `campaign "
            "export`; nothing was extracted"
        )
    return total + m.size


def _survey(bundle: Path, checksums: str) -> tuple[str, dict[str, str], dict[str, str]]:
    """The first pass: the top folder, each file's sha256 by its path under it, and the
    checksum listing (``runner.portable.checksums.read_listing``)."""
    seen: dict[str, str] = {}
    listing: bytes | None = None
    total = 0
    with tarfile.open(bundle, "r|gz") as tar:
        for m in _members(tar):
            total = _check_header(bundle, m, seen, total)
            seen[m.name.rstrip("/")] = ""
            if not m.isfile():
                continue
            stream = tar.extractfile(m)
            if m.name.count("/") == 1 and m.name.endswith("/" + checksums):
                listing = stream.read() if stream is not None else b""  # bounded above
                continue
            seen[m.name] = sha256_stream(stream)
    tops = {name.split("/", 1)[0] for name in seen}
    loose = sorted(n for n, h in seen.items() if h and "/" not in n)  # a file, not a folder
    if len(tops) != 1 or loose:
        shown = loose[:5] or sorted(tops)[:5]
        raise BundleError(f"{bundle} is not a campaign bundle (top entries {shown})")
    files = {n.split("/", 1)[1]: h for n, h in seen.items() if h}
    return tops.pop(), files, read_listing(listing, checksums)


def _write(bundle: Path, dest: Path, top: str, files: dict[str, str]) -> None:
    """The second pass: each checked member written, its hash checked again."""
    with tarfile.open(bundle, "r|gz") as tar:
        for m in _members(tar):
            target = dest / m.name
            if m.isdir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with target.open("xb") as out:
                digest = sha256_stream(tar.extractfile(m), out)
            rel = m.name.split("/", 1)[1]
            if rel in files and files[rel] != digest:
                raise BundleError(f"{bundle} changed while it was read: read it again")


def unpack(bundle: Path, dest: Path, checksums: str) -> Path:
    """Check ``bundle`` whole (see the module doc), then write it under ``dest``; returns
    the campaign folder.  Nothing is left under ``dest`` when it is refused."""
    if not bundle.is_file():
        raise BundleError(f"no bundle at {bundle}; pass the .tar.gz that `campaign export` wrote")
    try:
        top, files, expected = _survey(bundle, checksums)
    except _UNREADABLE as exc:
        raise BundleError(
            f"cannot read {bundle}: {exc or type(exc).__name__} (truncated or damaged?); "
            "copy the bundle again from where `campaign export` wrote it"
        ) from None
    check_listing(files, expected, checksums)
    root = dest / top
    if root.exists():
        raise BundleError(f"{root} already exists; pass an empty folder to unpack into")
    try:
        _write(bundle, dest, top, files)
    except BaseException as exc:
        shutil.rmtree(root, ignore_errors=True)
        if isinstance(exc, _UNREADABLE):
            raise BundleError(f"cannot read {bundle}: {exc}; copy it again") from None
        raise
    return root
