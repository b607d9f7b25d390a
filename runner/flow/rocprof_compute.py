"""Which rocprof-compute this host has, and whether its HBM byte counts can be trusted on
the target: releases before 3.5.0 (ROCm 7.2.0 ships 3.4.0; the fix came with 3.5.0 in
ROCm 7.12) report gfx950's HBM traffic low (about -25% of the bytes in all, -50% of the
reads), so ``campaign profile`` on such a host says so in ``profile.md``."""

from __future__ import annotations

import re
import shutil

from runner.core.errors import CommandFailed
from runner.core.processes import run

TOOL = "rocprof-compute"
FIXED = (3, 5, 0)  # the first release whose gfx950 HBM byte counts are right
WRONG_HBM_ARCHS = ("gfx950",)
_VERSION = re.compile(r"version:?\s*v?(\d+)\.(\d+)(?:\.(\d+))?", re.IGNORECASE)


def parse_version(text: str) -> tuple[int, int, int] | None:
    """``(3, 4, 0)`` from the ``rocprof-compute --version`` banner
    (``rocprofiler-compute version: 3.4.0 (release)``); None when no line says it."""
    for line in text.splitlines():
        match = _VERSION.search(line)
        if match:
            major, minor, patch = match.groups()
            return int(major), int(minor), int(patch or 0)
    return None


def hbm_note(arch: str, version_text: str | None) -> str | None:
    """What ``profile.md`` must say of rocprof-compute's HBM bytes on ``arch``: a warning
    before 3.5.0, that the version could not be read or checked; None where nothing
    is wrong (another arch, or 3.5.0 and later)."""
    if arch not in WRONG_HBM_ARCHS:
        return None
    if version_text is None:
        return f"{TOOL} is not on PATH here: its version (HBM bytes on {arch}) was not checked"
    version = parse_version(version_text)
    if version is None:
        first = (version_text.strip().splitlines() or [""])[0][:120]
        return f"{TOOL} --version said no version ({first!r}): its HBM bytes are unchecked"
    if version >= FIXED:
        return None
    shown = ".".join(map(str, version))
    return (
        f"{TOOL} {shown} is older than 3.5.0: on {arch} its HBM byte counts are wrong "
        "(about -25% of all bytes, -50% of the reads). Do not take HBM bandwidth or "
        "arithmetic intensity from it; upgrade to rocprof-compute 3.5.0 (ROCm 7.12) or later"
    )


def version_text(timeout: float = 60) -> str | None:
    """``rocprof-compute --version``'s output, or None when it is not on PATH."""
    if shutil.which(TOOL) is None:
        return None
    try:
        return run([TOOL, "--version"], check=False, timeout=timeout).stdout or ""
    except CommandFailed as exc:  # timed out
        return str(exc).splitlines()[0]
