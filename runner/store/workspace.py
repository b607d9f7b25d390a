"""Workspace mode: extract a minimal kernel from an upstream git tree, and sync only the
core kernel files back (docs/protocol.md §3.2).

``extract_workspace`` copies the named kernel files into ``<dest>/src/`` (keeping their
upstream relative paths), the focused test and bench files into ``tests/`` and
``bench/``, and records the upstream commit and each kernel file's sha256 in
``src/UPSTREAM.yaml``.  ``sync_back`` copies back exactly the recorded kernel files;
the scaffolding (tests/, bench/, anything else) never goes upstream.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import TypedDict

import yaml

from runner.core import processes as cmd
from runner.core.errors import CommandFailed, ConfigError
from runner.core.files import sha256_file, write_atomic
from runner.core.versions import require_schema_version

SCHEMA_VERSION = 1
RECORD = "UPSTREAM.yaml"


def _relative(name: str) -> PurePosixPath:
    """A safe upstream-relative path (no absolute path, no ``..``)."""
    rel = PurePosixPath(name)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ConfigError(f"{name!r}: give paths relative to the upstream tree, without '..'")
    return rel


def upstream_commit(upstream: Path) -> str:
    try:
        proc = cmd.run(["git", "-C", str(upstream), "rev-parse", "HEAD"])
    except CommandFailed as exc:
        raise ConfigError(
            f"{upstream} is not a git checkout with a commit ({exc.output.strip()}); "
            "point --upstream at the target's git tree"
        ) from None
    return proc.stdout.strip()


class PlatformRecord(TypedDict):
    """The platform layer a stack carries (``runner.store.stack_platform``)."""

    name: str
    gpu: str
    amd: bool
    note: str
    applied: list[str]
    files: list[str]


class WorkspaceRecord(TypedDict, total=False):
    """``src/UPSTREAM.yaml``: where the workspace came from, each file copied (its
    ``path`` and ``sha256``), and what the caller recorded beside (``extra``)."""

    schema_version: int
    upstream: str
    commit: str
    files: list[dict[str, str]]
    tests: list[dict[str, str]]
    bench: list[dict[str, str]]
    support: list[dict[str, str]]
    commands: dict[str, str]
    target: str
    stand_ins: list[str]
    platform: PlatformRecord


def _copy_named(upstream: Path, names: Sequence[str], dest: Path) -> list[dict[str, str]]:
    copied = []
    for name in names:
        rel = _relative(name)
        src = upstream / rel
        if not src.is_file():
            raise ConfigError(f"{name}: not a file in {upstream}; check the kernel_source list")
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        copied.append({"path": rel.as_posix(), "sha256": sha256_file(target)})
    return copied


def extract_workspace(
    upstream: Path,
    files: list[str],
    dest: Path,
    *,
    tests: Sequence[str] = (),
    bench: Sequence[str] = (),
    support: Sequence[str] = (),
    extra: WorkspaceRecord | None = None,
) -> WorkspaceRecord:
    """Extract ``files`` (kernel sources) plus the focused ``tests`` and ``bench`` files
    from ``upstream`` into ``dest``; returns (and writes) the UPSTREAM.yaml record.
    ``support`` files (the rest of the package, so that it imports) go to ``src/`` too
    but, like tests and bench, are never synced back; ``extra`` keys are recorded."""
    if not files:
        raise ConfigError("no kernel files named; pass the kernel_source file(s) to extract")
    upstream = upstream.resolve()
    commit = upstream_commit(upstream)
    if (dest / "src" / RECORD).exists():
        raise ConfigError(f"{dest}/src/{RECORD} exists: this workspace was already extracted")
    record: WorkspaceRecord = {
        "schema_version": SCHEMA_VERSION,
        "upstream": str(upstream),
        "commit": commit,
        "files": _copy_named(upstream, files, dest / "src"),
        "tests": _copy_named(upstream, tests, dest / "tests"),
        "bench": _copy_named(upstream, bench, dest / "bench"),
    }
    record.update(extra or {})
    if support:
        record["support"] = _copy_named(
            upstream, [f for f in support if f not in files], dest / "src"
        )
    write_atomic(dest / "src" / RECORD, yaml.safe_dump(record, sort_keys=False))
    return record


def load_record(dest: Path) -> WorkspaceRecord:
    path = dest / "src" / RECORD
    try:
        record: WorkspaceRecord = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} not found: {dest} is not an extracted workspace") from None
    version = record.get("schema_version") if isinstance(record, dict) else None
    require_schema_version(
        version,
        SCHEMA_VERSION,
        str(path),
        older="re-extract the workspace with this turbo-campaign",
        newer="upgrade turbo-campaign, or re-extract the workspace with this one",
    )
    return record


def sync_back(dest: Path, upstream: Path, only: Sequence[str] | None = None) -> list[str]:
    """Copy the recorded core kernel files (or the subset ``only``) from ``dest/src``
    back into ``upstream``; returns the paths written.  Anything else (tests/, bench/,
    unrecorded files) is refused, and so is an upstream file that changed since the
    extraction (a conflict to resolve by hand)."""
    record = load_record(dest)
    core = _core_paths(record)
    if only is not None:
        check_scaffolding(dest, only)
        core = [path for path in core if path in set(only)]
    upstream = upstream.resolve()
    recorded = {entry["path"]: entry["sha256"] for entry in record["files"]}
    written = []
    for path in core:
        src = dest / "src" / path
        if not src.is_file():
            raise ConfigError(f"{src} is missing; restore it from the kernel snapshot")
        target = upstream / path
        if target.is_file() and target.read_bytes() == src.read_bytes():
            continue
        if target.is_file() and sha256_file(target) != recorded[path]:
            raise ConfigError(
                f"{target} changed upstream since the extraction (commit "
                f"{record['commit'][:12]}); merge it by hand, then re-extract"
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
        written.append(path)
    return written


def _core_paths(record: WorkspaceRecord) -> list[str]:
    """The recorded kernel paths; a record that lists scaffolding as core is refused."""
    core = [_relative(entry["path"]).as_posix() for entry in record["files"]]
    scaffolding = {
        e["path"]
        for e in record.get("tests", []) + record.get("bench", []) + record.get("support", [])
    }
    clash = sorted(set(core) & scaffolding)
    if clash:
        raise ConfigError(
            f"UPSTREAM.yaml lists {clash} both as kernel and as test/bench files; "
            "only core kernel files may be synced: fix the record"
        )
    return core


def check_scaffolding(dest: Path, paths: Sequence[str]) -> None:
    """Refuse a sync request naming anything but recorded core kernel files."""
    core = {entry["path"] for entry in load_record(dest)["files"]}
    extra = sorted(set(paths) - core)
    if extra:
        raise ConfigError(
            f"refusing to sync {extra}: only core kernel files {sorted(core)} go upstream; "
            "tests/ and bench/ are workspace scaffolding"
        )


def code_root(tree: Path) -> Path:
    """Where the target package of ``tree`` lives: ``src/`` of an extracted workspace
    (its ``src/UPSTREAM.yaml`` says so), the tree itself otherwise."""
    return tree / "src" if (tree / "src" / RECORD).is_file() else tree


def workspace_command(command: str, tests: Sequence[str], bench: Sequence[str]) -> str:
    """An upstream command with its test and bench paths moved under ``tests/`` and
    ``bench/``, as they lie in the workspace: a copied file's path, or a folder that
    holds one (``pytest tests/pytorch/`` when ``tests/pytorch/ops/test_x.py`` was
    copied), each rewritten once."""
    for prefix, names in (("tests", tests), ("bench", bench)):
        folders = {str(parent) for name in names for parent in PurePosixPath(name).parents}
        folders.discard(".")
        files = [re.escape(name) for name in names]
        # a folder only as a whole path part: followed by '/', a space, a quote or the end
        dirs = [rf"{re.escape(d)}(?=[/\s\"']|$)" for d in folders]
        if not files and not dirs:
            continue
        either = "|".join(sorted(files + dirs, key=len, reverse=True))
        command = re.sub(rf"(?<![\w/.])(?={either})", f"{prefix}/", command)
    return command


def suite_command(command: str, tree: Path) -> str:
    """The target's full-suite ``command`` as it runs in ``tree``: in an extracted
    workspace, over the upstream tests copied under its ``tests/`` (the workspace holds
    no other), elsewhere unchanged."""
    if code_root(tree) == tree:
        return command
    tests = [str(t["path"]) for t in load_record(tree).get("tests") or []]
    return workspace_command(command, tests, ())
