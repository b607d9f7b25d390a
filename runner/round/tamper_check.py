"""The end-of-round proof that every role ran its own files (docs/reliability.md §7
row 14).

Before the first process of a round's measurement starts (after the builds), the host
takes each role's tree state (``tree_state``): HEAD, the index and the blob id of every
file that differs from it or that git does not track (build products included; bytecode
caches aside).  Each worker records the files it loaded from its tree and their blob
ids right after the target's import and again at the end of its pass
(``runner.worker.bench.provenance.record_loaded``, ``loaded.json``).  After the round,
``proof`` (through ``tampered``) compares those with the role's state, and the guarded roles' trees
(the incumbent's) with their state before: a difference is ``Tampered`` naming the role
and the file, and the round is FAILED, never judged.

Host-side; runs git through ``runner.core.processes.run``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Protocol

from runner.core.artifact_names import BENCHMARK_CSV, LOADED
from runner.core.errors import MeasurementFailed, Tampered
from runner.core.files import blob_hash
from runner.core.loaded_record import LoadedRecord, read_loaded
from runner.core.processes import run
from runner.core.startup import (
    importable_files,
    interpreter_dirs,
    shadowing_dirs,
    startup_files,
)
from runner.core.step_times import StepTimes
from runner.measure.beside import BesideWork
from runner.measure.host_records import rewritten

GUARD = "tamper check"  # the guard a Tampered of this module names
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
        paths = sorted(
            p
            for p in self.files.keys() | later.files.keys()
            if self.files.get(p) != later.files.get(p)
        )
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


STARTUP = "start-up files"  # what an interpreter may run before the worker's first line
# what a later process could load and no interpreter writes by itself (bytecode caches
# are the interpreter's; a native build writes its modules before the snapshot)
SOURCES = (".py", ".pth", ".so", ".pyd")


@dataclass(frozen=True)
class StartupState(TreeState):
    """The start-up files (absolute path -> blob id) of the folders ``dirs``, and
    everything importable (``importable``) directly in the folders a worker's path
    holds before its own and site-packages (``shadowing``: the harness root, the
    standard library)."""

    dirs: tuple[Path, ...] = ()
    shadowing: tuple[Path, ...] = ()
    importable: dict[str, str] = field(default_factory=dict)


def startup_state(trees: Iterable[Path], dirs: Iterable[Path] | None = None) -> StartupState:
    """The interpreter start-up files (``runner.core.startup.startup_files``) of every
    folder a worker's ``sys.path`` may hold: ``dirs`` (default: this interpreter's, as
    a local worker runs it), the harness root and each role's tree."""
    import runner

    harness_root = Path(runner.__file__).resolve().parent.parent
    folders = tuple(
        dict.fromkeys([*(interpreter_dirs() if dirs is None else dirs), harness_root, *trees])
    )
    shadowing = tuple(shadowing_dirs(harness_root))
    return StartupState(
        STARTUP,
        Path("/"),
        "",
        startup_files(folders),
        folders,
        shadowing,
        importable_files(shadowing),
    )


def snapshot(trees: Mapping[str, Path], dirs: Iterable[Path] | None = None) -> dict[str, TreeState]:
    """Every role's tree state (role -> tree), the harness's and the start-up files'
    (``startup_state`` over ``dirs``), taken before the round's processes start."""
    roles = {role: tree_state(role, tree) for role, tree in trees.items()}
    return {HARNESS: harness_state(), STARTUP: startup_state(trees.values(), dirs), **roles}


def startup_changes(before: Mapping[str, TreeState]) -> list[str]:
    """Each interpreter start-up file that appeared, changed or went since ``before``,
    in words: a process of the round wrote it, so later processes would run it."""
    state = before.get(STARTUP)
    if not isinstance(state, StartupState):
        return []
    later = startup_files(state.dirs)
    found = [
        f"interpreter start-up file {p} was created or changed while the round ran "
        "(harness proof: start-up files)"
        for p in sorted(state.files.keys() | later.keys())
        if state.files.get(p) != later.get(p)
    ]
    return found + shadow_changes(state)


def shadow_changes(state: StartupState) -> list[str]:
    """Each module or package that appeared, changed or went directly in a folder a
    worker imports from before its own paths (the harness root, the standard library),
    in words: a ``torch.py`` there shadows the real one in every later worker."""
    later = importable_files(state.shadowing)
    return [
        f"importable file {p} was created or changed while the round ran, ahead of "
        "site-packages on every worker's path (harness proof: module shadow)"
        for p in sorted(state.importable.keys() | later.keys())
        if state.importable.get(p) != later.get(p)
    ]


def created_files(before: Mapping[str, TreeState], guarded: Iterable[str]) -> list[str]:
    """Python sources, path files and extension modules (``SOURCES``, start-up files)
    that appeared or changed in an unguarded role's own tree since ``before`` (a guarded
    one is compared whole), in words: nothing a role's process writes may be run by a
    later one."""
    problems = []
    for role, state in before.items():
        if role in (HARNESS, STARTUP) or role in guarded:
            continue
        later = tree_state(role, state.tree)
        new = [
            p
            for p in state.changes(later)
            if p != "HEAD" and p.endswith(SOURCES) and later.files.get(p, GONE) != GONE
        ]
        if new:
            problems.append(
                f"the {role}'s own processes wrote {', '.join(new[:10])} into its "
                f"tree {state.tree} while the round ran (harness proof: files a "
                "role created)"
            )
    return problems


def _worker_records(tmp: Path) -> Iterable[tuple[Path, LoadedRecord | None]]:
    """Each worker folder of the round (it has a ``worker.log``) that left a
    ``benchmark.csv``, with its ``loaded.json`` (None when missing or unreadable)."""
    for log in sorted(tmp.glob("*/worker.log")):
        folder = log.parent
        if (folder / BENCHMARK_CSV).is_file():
            yield folder, read_loaded(folder)


def _mismatches(
    name: str, role: str, state: TreeState, record: LoadedRecord, harness: bool
) -> list[str]:
    """The files of ``state`` that a worker's ``record`` (of the harness where
    ``harness``, else of the tree under test) loaded with other bytes."""
    wrong: dict[str, list[str]] = {}
    for phase, when in (("load", "at import"), ("end", "at the end of its pass")):
        for rel, got in sorted(record.loaded(phase, harness=harness).items()):
            want = state.files.get(rel)
            if want is None and rel.endswith((".so", ".pyd")):
                continue  # a native build's module, made after the snapshot by design
            if got != want:  # None: a file the snapshot did not have, created since
                wrong.setdefault(rel, []).append(f"{when} blob {str(got)[:12]}")
    whose = "the harness's" if state.role == HARNESS else f"the {role}'s"
    where = "harness file " if state.role == HARNESS else ""
    return [
        f"{name} ({role}) loaded {where}{rel}, not {whose} "
        + (
            f"(blob {state.files[rel][:12]})"
            if rel in state.files
            else "(created after the round's snapshot)"
        )
        + ": "
        + ", ".join(seen)
        for rel, seen in wrong.items()
    ]


def tampering(
    before: Mapping[str, TreeState], tmp: Path, guarded: Iterable[str] = ("incumbent",)
) -> list[str]:
    """What changed under a role while the round ran: a file a worker loaded whose
    blob is not its role's, a worker that left numbers but no record of what it loaded,
    a guarded role's tree that is not as it was, a record the host wrote that changed
    since (``runner.measure.host_records.rewritten``).  Empty: nothing."""
    problems: list[str] = []
    for folder, record in _worker_records(tmp):
        state = before.get(record.role) if record is not None else None
        if record is None or state is None or "end" not in record.tree:
            problems.append(
                f"{folder.name} left numbers without a record of the files it loaded ({LOADED})"
            )
            continue
        problems += _mismatches(folder.name, record.role, state, record, harness=False)
        harness = before.get(HARNESS)
        if harness is not None and record.harness_root == str(harness.tree):
            problems += _mismatches(folder.name, record.role, harness, record, harness=True)
    guarded = tuple(guarded)
    return (
        problems
        + guarded_changes(before, guarded)
        + startup_changes(before)
        + created_files(before, guarded)
        + rewritten(tmp)
    )


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
            problems.append(
                f"the {role}'s tree {state.tree} changed while the round ran: "
                + ", ".join(changed[:10])
            )
    return problems


def tampered(
    before: Mapping[str, TreeState], tmp: Path, guarded: Iterable[str] = ("incumbent",)
) -> Tampered | None:
    """``Tampered`` naming every file that ``tampering`` finds, or None."""
    return _tampered(tampering(before, tmp, tuple(guarded)))


def prove_ready(before: Mapping[str, TreeState], guarded: Iterable[str] = ("incumbent",)) -> None:
    """Before the first timed turn (a ``BesideWork`` ready check): every worker has imported
    its code, so a candidate whose import rewrote a guarded role's tree is caught now,
    before anything is measured, not at the end of the round."""
    early = guarded_changes(before, guarded) + startup_changes(before)
    found = [f"{p} (found before the first timed turn)" for p in early]
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
        "candidate patch before measuring it again",
        guard=GUARD,
        problems=problems,
    )


# ---- the round's builds ----------------------------------------------------------------
REFERENCE_ROLES = ("baseline", "incumbent")  # what a comparison measures the others against


def reference_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """The roles of a comparison whose whole tree is guarded while it measures (the
    incumbent of a round, the baseline of an acceptance): the others' own processes
    may write their own trees, never these."""
    return tuple(r for r in roles if r in REFERENCE_ROLES)


def guarded_roles(roles: Iterable[str]) -> tuple[str, ...]:
    """The roles whose whole tree no process may write while a comparison measures:
    the reference's (``reference_roles``); with two candidates or more every role's,
    since one candidate's processes could write another's tree, and that cannot be
    told from the other's own writes."""
    listed = tuple(roles)
    reference = reference_roles(listed)
    return listed if len(listed) - len(reference) > 1 else reference


@dataclass
class BuildWatch:
    """Every role's tree across a round's builds (``runner.round.build.built_roles``),
    for any number of roles: before any build, before each role's own build and after
    it.  Between those points only other roles' builds ran, so any change then is
    theirs: a file rewritten before a role's build, or a role's build products (or any
    other file) rewritten after it.  ``finish`` raises ``Tampered`` naming them, before
    anything is tested or measured."""

    trees: Mapping[str, Path]
    unbuilt: dict[str, TreeState] = field(default_factory=dict)
    built: dict[str, TreeState] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.unbuilt = snapshot(self.trees)

    def before(self, role: str) -> None:
        if self.built:  # another role's build ran since the first snapshot
            self._compare(role, self.unbuilt[role], "before its own build")

    def after(self, role: str) -> None:
        self.built[role] = tree_state(role, self.trees[role])

    def finish(self) -> None:
        last = list(self.built)[-1:]
        for role, state in self.built.items():
            if role not in last:
                self._compare(role, state, "after its own build")
        harness = self.unbuilt[HARNESS]
        changed = harness.changes(harness_state())
        if changed:
            self.problems.append(
                f"the harness {harness.tree} changed while the round's builds "
                "ran: " + ", ".join(changed[:10])
            )
        error = _tampered(self.problems)
        if error is not None:
            raise error

    def _compare(self, role: str, state: TreeState, when: str) -> None:
        changed = state.changes(tree_state(role, state.tree))
        if changed:
            why = f"changed {when}, while another role's build ran"
            listed = ", ".join(changed[:10])
            self.problems.append(f"the {role}'s tree {state.tree} {why}: {listed}")


# ---- a comparison's measurement --------------------------------------------------------
class Guarded(Protocol):
    """What ``proof`` needs of a round (or an acceptance run): its scratch folder and
    its step clock."""

    @property
    def tmp(self) -> Path: ...

    @property
    def times(self) -> StepTimes: ...


@contextlib.contextmanager
def proof(
    host: Guarded,
    trees: Mapping[str, Path],
    confirmations: Callable[[], Iterable[tuple[Path, str]]] = tuple,
) -> Iterator[BesideWork]:
    """Around one comparison's measurement (a round, ``campaign accept``, ``campaign
    reproduce``): the roles' states now, the guarded roles' trees (``guarded_roles``)
    proven unchanged before the first timed turn (``prove_ready`` as the ready check it
    yields, which the caller hands to the measurement), a crash explained as tampering
    when it was, and every worker's loaded files and the guarded trees proven at the
    end.  ``confirmations``: the folders of measurements made outside ``host.tmp`` (a
    tournament winner's fresh confirmation), each with the role whose tree its
    ``candidate`` workers ran, asked for when the checks run."""
    guarded = guarded_roles(trees)
    with host.times.step("tamper check: trees before"):
        before = snapshot(trees)

    def found() -> Tampered | None:
        error = tampered(before, host.tmp, guarded)
        for folder, role in confirmations():
            if error is None:
                error = tampered({**before, "candidate": before[role]}, folder, guarded)
        return error

    try:
        yield BesideWork(ready_checks=(partial(prove_ready, before, guarded),))
    except MeasurementFailed as exc:  # crashed because another role changed its files?
        cause = found()
        if cause is None:
            raise
        raise cause from exc
    with host.times.step("tamper check: trees and loaded files after"):
        cause = found()
    if cause is not None:
        raise cause
