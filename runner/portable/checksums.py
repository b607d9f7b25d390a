"""A bundle's checksum listing (``MANIFEST.sha256``, ``sha256sum -c`` format), read and
held against the files' own hashes: one reader for both checks a bundle gets, the
archive's members before anything is written (``runner.portable.unpack``) and the
extracted tree after (``runner.portable.bundle.verify_checksums``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from runner.core.errors import BundleError


def read_listing(raw: bytes | None, checksums: str) -> dict[str, str]:
    """The listing named ``checksums`` (its bytes; None where the bundle has none) as
    path -> sha256, refused when missing, not UTF-8, or holding a line that is not
    ``<sha256>  <relative path>`` with a path that stays inside the bundle."""
    if raw is None:
        raise BundleError(f"the bundle has no {checksums}; it was not made by `campaign export`")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BundleError(f"{checksums} is not UTF-8 text: re-export the bundle") from None
    expected: dict[str, str] = {}
    for line in text.splitlines():
        digest, _, rel = line.partition("  ")
        unsafe = rel.startswith("/") or ".." in Path(rel).parts
        if not rel or len(digest) != 64 or unsafe:
            raise BundleError(f"{checksums} has a malformed line {line!r}: re-export the bundle")
        expected[rel] = digest
    return expected


def check_listing(files: Mapping[str, str], expected: Mapping[str, str], checksums: str) -> None:
    """Refuse ``files`` (path -> sha256 of what the bundle holds) unless they are the
    listing's ``expected``: a file it does not list first, then, in the listing's
    order, one it lists that is missing or whose hash differs."""
    for rel in files:
        if rel not in expected:
            raise BundleError(f"{rel} is not in {checksums}: the bundle was altered; re-export")
    for rel, digest in expected.items():
        if rel not in files:
            raise BundleError(f"{rel} is listed in {checksums} but missing: re-export it")
        if files[rel] != digest:
            raise BundleError(
                f"checksum mismatch for {rel}: the bundle was altered after export; "
                "get an untouched copy (or re-export it on the campaign's host)"
            )
