"""The end-of-round proof that every role ran its own files (docs/reliability.md §7,
issue 27 row 14).

Before the first process of a round's measurement starts (after the builds), the host
takes each role's tree state (``tree_state``): HEAD, the index and the blob id of every
file that differs from it or that git does not track (build products included; bytecode
caches aside).  Each worker records the files it loaded from its tree and their blob
ids right after the target's import and again at the end of its pass
(``runner.bench.provenance.record_loaded``, ``loaded.json``).  After the round,
``prove_untouched`` compares those with the role's state, and the guarded roles' trees
(the incumbent's) with their state before: a difference is ``Tampered`` naming the role
and the file, and the round is FAILED, never judged.

Host-side; runs git through ``runner.core.processes.run``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import Tampered
from runner.core.files import blob_hash
from runner.core.processes import run

LOADED = "loaded.json"  # written by runner.bench.provenance.record_loaded
SKIPPED_PARTS = frozenset({"__pycache__", ".pytest_cache", ".git"})
GONE = "(deleted)"


@dataclass(frozen=True)
class TreeState:
    """One role's tree as the round found it: ``head`` (HEAD's commit) and ``files``
    (path -> blob id: the index's, or the file's own where it differs, is untracked or
    is ignored; GONE for a tracked file deleted in the working tree)."""

    role: str
    tree: Path
    head: str
    files: dict[str, str]

    def changes(self, later: TreeState) -> list[str]:
        """The paths whose blob differs in ``later`` (HEAD as ``HEAD``)."""
        paths = sorted(p for p in self.files.keys() | later.files.keys()
                       if self.files.get(p) != later.files.get(p))  # fmt: skip
        return (["HEAD"] if self.head != later.head else []) + paths


def _git(tree: Path, *args: str) -> str:
    return run(["git", *args], cwd=tree).stdout or ""


def _skipped(path: str) -> bool:
    return any(part in SKIPPED_PARTS for part in Path(path).parts)


def _walk(tree: Path, rel: str) -> Iterable[str]:
    """``rel`` itself, or every file under it when git reported a folder."""
    path = tree / rel
    if not path.is_dir() or path.is_symlink():
        yield rel.rstrip("/")
        return
    for p in sorted(path.rglob("*")):
        if p.is_file() and not p.is_symlink():
            yield p.relative_to(tree).as_posix()


def _status_paths(tree: Path) -> list[str]:
    """Every path ``git status`` names (changed, untracked, ignored), folders expanded;
    the source of a rename too."""
    out = _git(tree, "status", "--porcelain", "-z", "--untracked-files=all", "--ignored")
    fields = out.split("\0")
    paths: list[str] = []
    i = 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":  # "R  new\0old": the old path follows
            paths.append(fields[i])
            i += 1
    return sorted({p for rel in paths for p in _walk(tree, rel) if not _skipped(p)})


def tree_state(role: str, tree: Path) -> TreeState:
    """``role``'s tree as it is now (see ``TreeState``)."""
    files: dict[str, str] = {}
    for line in _git(tree, "ls-files", "-s", "-z").split("\0"):
        if line:
            meta, _, path = line.partition("\t")
            files[path] = meta.split()[1]
    for rel in _status_paths(tree):
        file = tree / rel
        try:
            files[rel] = blob_hash(file.read_bytes()) if file.is_file() else GONE
        except OSError:
            files[rel] = GONE
    return TreeState(role, tree, _git(tree, "rev-parse", "HEAD").strip(), files)


HARNESS = "harness"  # the runner package, as this host holds it


def harness_state() -> TreeState:
    """The blob id of every file of the ``runner`` package this host runs (what a
    local worker imports as its harness)."""
    import runner

    root = Path(runner.__file__).resolve().parent
    rels = [p.relative_to(root).as_posix() for p in sorted(root.rglob("*.py"))]
    files = {rel: blob_hash((root / rel).read_bytes()) for rel in rels if not _skipped(rel)}
    return TreeState(HARNESS, root, "", files)


def snapshot(trees: Mapping[str, Path]) -> dict[str, TreeState]:
    """Every role's tree state (role -> tree) and the harness's, taken before the
    round's processes start."""
    roles = {role: tree_state(role, tree) for role, tree in trees.items()}
    return {HARNESS: harness_state(), **roles}


def _worker_records(tmp: Path) -> Iterable[tuple[Path, dict[str, object] | None]]:
    """Each worker folder of the round (it has a ``worker.log``) that left a
    ``benchmark.csv``, with its ``loaded.json`` (None when missing or unreadable)."""
    for log in sorted(tmp.glob("*/worker.log")):
        folder = log.parent
        if not (folder / "benchmark.csv").is_file():
            continue
        try:
            yield folder, json.loads((folder / LOADED).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            yield folder, None


def _mismatches(
    name: str, role: str, state: TreeState, record: Mapping[str, object], prefix: str
) -> list[str]:
    """The files of ``state`` that a worker's ``record`` (its phases under ``prefix``)
    loaded with other bytes."""
    wrong: dict[str, list[str]] = {}
    for phase, when in (("load", "at import"), ("end", "at the end of its pass")):
        loaded = record.get(prefix + phase) or {}
        for rel, got in sorted(loaded.items() if isinstance(loaded, dict) else ()):
            want = state.files.get(rel)
            if want is not None and got != want:
                wrong.setdefault(rel, []).append(f"{when} blob {str(got)[:12]}")
    whose = "the harness's" if state.role == HARNESS else f"the {role}'s"
    where = "harness file " if state.role == HARNESS else ""
    return [
        f"{name} ({role}) loaded {where}{rel}, not {whose} (blob {state.files[rel][:12]}): "
        + ", ".join(seen)
        for rel, seen in wrong.items()
    ]


def tampering(
    before: Mapping[str, TreeState], tmp: Path, guarded: Iterable[str] = ("incumbent",)
) -> list[str]:
    """What changed under a role while the round ran: a file a worker loaded whose
    blob is not its role's, a worker that left numbers but no record of what it loaded,
    a guarded role's tree that is not as it was.  Empty: nothing."""
    problems: list[str] = []
    for folder, record in _worker_records(tmp):
        role = str((record or {}).get("role", ""))
        state = before.get(role)
        if record is None or state is None or "end" not in record:
            problems.append(f"{folder.name} left numbers without a record of the files it "
                            f"loaded ({LOADED})")  # fmt: skip
            continue
        problems += _mismatches(folder.name, role, state, record, "")
        harness = before.get(HARNESS)
        if harness is not None and record.get("harness_root") == str(harness.tree):
            problems += _mismatches(folder.name, role, harness, record, "harness_")
    return problems + guarded_changes(before, guarded)


def guarded_changes(
    before: Mapping[str, TreeState], guarded: Iterable[str] = ("incumbent",)
) -> list[str]:
    """A guarded role's tree that is not as it was in ``before``, in words."""
    problems = []
    for role in guarded:
        if role not in before:
            continue
        state = before[role]
        changed = state.changes(tree_state(role, state.tree))
        if changed:
            problems.append(f"the {role}'s tree {state.tree} changed while the round ran: "
                            + ", ".join(changed[:10]))  # fmt: skip
    return problems


def changed_by_builds(
    unbuilt: Mapping[str, TreeState],
    built: Mapping[str, TreeState],
    guarded: Iterable[str] = ("incumbent",),
) -> list[str]:
    """A guarded role's files (HEAD, tracked or already there) that the round's builds
    changed: a build adds its products, it never rewrites what it was given; another
    role's build commands (its setup.py) may have written them."""
    problems = []
    for role in guarded:
        if role in unbuilt and role in built:
            state = unbuilt[role]
            changed = [p for p in state.changes(built[role]) if p == "HEAD" or p in state.files]
            if changed:
                problems.append(f"the {role}'s tree {state.tree} changed while the round's "
                                "builds ran: " + ", ".join(changed[:10]))  # fmt: skip
    return problems


def tampered(
    before: Mapping[str, TreeState],
    tmp: Path,
    guarded: Iterable[str] = ("incumbent",),
    unbuilt: Mapping[str, TreeState] | None = None,
) -> Tampered | None:
    """``Tampered`` naming every file that ``tampering`` finds (and, given the states
    before the builds, ``changed_by_builds``), or None."""
    guarded = tuple(guarded)
    problems = changed_by_builds(unbuilt, before, guarded) if unbuilt is not None else []
    problems += tampering(before, tmp, guarded)
    return _tampered(problems)


def prove_ready(before: Mapping[str, TreeState], guarded: Iterable[str] = ("incumbent",)) -> None:
    """Before the first timed turn (``Round.ready_checks``): every worker has imported
    its code, so a candidate whose import rewrote a guarded role's tree is caught now,
    before anything is measured, not at the end of the round."""
    found = [f"{p} (found before the first timed turn)" for p in guarded_changes(before, guarded)]
    error = _tampered(found)
    if error is not None:
        raise error


def _tampered(problems: list[str]) -> Tampered | None:
    if not problems:
        return None
    return Tampered(
        "TAMPERED: a role's files changed while the round ran, so its numbers are not "
        "of its own commit; the round is FAILED and nothing was judged:\n  "
        + "\n  ".join(problems)
        + "\nanother role's process wrote to them (the candidate's code can reach every "
        "tree the round's processes can write: docs/reliability.md §7); review the "
        "candidate patch before measuring it again"
    )


def prove_untouched(
    before: Mapping[str, TreeState],
    tmp: Path,
    guarded: Iterable[str] = ("incumbent",),
    unbuilt: Mapping[str, TreeState] | None = None,
) -> None:
    """Raise ``tampered``'s error when a role's files changed."""
    error = tampered(before, tmp, guarded, unbuilt)
    if error is not None:
        raise error
