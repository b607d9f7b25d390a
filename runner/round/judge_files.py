"""The judge belongs to the incumbent (docs/reliability.md §7 row 2).

What a verdict is computed with must not come from the candidate:

* The benchmark harness is turbo-campaign's own worker engine (``runner.worker.bench``) and the
  quick script is the campaign folder's ``quick_test_bench.py``: neither is read from a
  role's tree.
* The candidate's change may touch only the target's ``kernel_source`` files (a path
  ending in ``/``: a folder) and its declared build files (``Target.build_files``).
  Anything else is refused before measuring (``check_scope``, exit 2, naming the files),
  unless the round declares it (``campaign validate --allow-outside PATH``, repeatable),
  which its summary and ``result.json`` record.
* The focused test is the lineage head's: ``restore_judge`` copies the incumbent's test
  file(s) named in ``test_command`` (and the ``conftest.py`` files pytest loads for them,
  and any file the patch touched under their folders) over the candidate's worktree
  before the test runs; a file the candidate added there is removed.  The test then
  runs in the candidate's tree as before, so it imports the candidate's package (the job
  puts its tree first on ``PYTHONPATH`` and runs there) and judges the candidate's
  kernel with the incumbent's assertions.  Running the incumbent's file from the
  incumbent's tree instead would import the incumbent's package (pytest puts the test's
  root first on ``sys.path``) and test the wrong code; the copy works the same for every
  executor, since the tree is what the job (or its container) receives.
* The candidate's own build runs after that copy, in its own tree (its ``setup.py``
  runs arbitrary code: locally and on a Slurm node in place, in docker and a Slurm
  image in the build container whose tree the test then runs on), so it could rewrite
  the restored files.  ``judge_digests`` names what each must hold (the head's sha256,
  or "" where the head has none), the focused test's spec carries it, and the worker
  checks the tree it runs the test in right before the command
  (``runner.worker.bench.focused_test.judge_changes``): a difference fails the round as
  TAMPERED naming the file, whichever executor ran it.

The lineage commit of an accepted round is made from the patch itself, so a declared
change to a test file enters the lineage as declared; it judges the rounds after it.
"""

from __future__ import annotations

import fnmatch
import hashlib
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

from runner.core.errors import PatchRefused
from runner.store.manifest import Manifest
from runner.targets.base import Target


def _in_scope(path: str, patterns: Iterable[str]) -> bool:
    for p in patterns:
        if path == p or (p.endswith("/") and path.startswith(p)) or fnmatch.fnmatchcase(path, p):
            return True
    return False


def outside_scope(m: Manifest, target: Target, touched: Sequence[str]) -> list[str]:
    """The touched paths outside ``kernel_source`` and the target's build files."""
    scope = [*m.kernel_source, *target.build_files]
    return [p for p in touched if not _in_scope(p, scope)]


def check_scope(
    m: Manifest, target: Target, touched: Sequence[str], allow_outside: Sequence[str]
) -> list[str]:
    """Refuse a change outside the kernel scope that the round did not declare
    (ConfigError, exit 2); returns the declared outside paths it touches."""
    outside = outside_scope(m, target, touched)
    undeclared = [p for p in outside if not _in_scope(p, allow_outside)]
    if undeclared:
        scope = ", ".join([*m.kernel_source, *target.build_files]) or "(none)"
        flags = " ".join(f"--allow-outside {shlex.quote(p)}" for p in undeclared)
        raise PatchRefused(
            f"the candidate patch touches {len(undeclared)} file(s) outside the kernel "
            f"source and the target's build files: {', '.join(undeclared)}. The round may "
            f"change only {scope}: the focused test, the benchmark and everything the "
            "verdict is computed with belong to the incumbent. Drop those changes, or "
            f"declare them for this round ({flags}; recorded in its summary), or widen the "
            "scope as a recorded change (`campaign set kernel_source '[...]' --reason "
            "TEXT`); nothing was measured"
        )
    return outside


def named_test_paths(m: Manifest, tree: Path) -> list[str]:
    """The files and folders of ``tree`` that ``test_command`` names (pytest node ids
    cut at ``::``)."""
    try:
        words = shlex.split(m.test_command)
    except ValueError:
        words = m.test_command.split()
    found = []
    for word in words:
        rel = word.split("::", 1)[0]
        if not rel or rel.startswith("-") or "=" in rel or Path(rel).is_absolute():
            continue
        if ".." in PurePosixPath(rel).parts:
            continue
        if (tree / rel).exists() and rel not in found:
            found.append(rel.rstrip("/"))
    return found


def judge_paths(m: Manifest, inc_tree: Path, touched: Sequence[str]) -> list[str]:
    """The incumbent's judge files: the test files named in ``test_command``, the
    ``conftest.py`` of every folder from theirs up to the root, ``pytest.ini``, and any
    touched path under the test folders (helpers the tests import)."""
    named = named_test_paths(m, inc_tree)
    files: list[str] = []
    folders: set[str] = set()
    for rel in named:
        if (inc_tree / rel).is_dir():
            folders.add(rel)
            files += sorted(
                str(p.relative_to(inc_tree)) for p in (inc_tree / rel).rglob("*") if p.is_file()
            )
            start = PurePosixPath(rel)
        else:
            files.append(rel)
            start = PurePosixPath(rel).parent
            folders.add(str(start))
        for parent in (start, *start.parents):
            files.append(str(parent / "conftest.py") if str(parent) != "." else "conftest.py")
    if named:
        files.append("pytest.ini")
    for p in touched:
        if any(f == "." or p.startswith(f + "/") for f in folders):
            files.append(p)
    return sorted(set(files))


def restore_judge(
    m: Manifest, inc_tree: Path, cand_tree: Path, touched: Sequence[str]
) -> list[str]:
    """Make the candidate tree's judge files the incumbent's (see the module doc);
    returns the paths that differed and were restored (or removed)."""
    restored = []
    for rel in judge_paths(m, inc_tree, touched):
        inc, cand = inc_tree / rel, cand_tree / rel
        if inc.is_file():
            if cand.is_file() and cand.read_bytes() == inc.read_bytes():
                continue
            if cand.is_dir():
                shutil.rmtree(cand)
            cand.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(inc, cand)
            restored.append(rel)
        elif cand.is_file():
            cand.unlink()
            restored.append(rel)
    return restored


def judge_digests(m: Manifest, inc_tree: Path, touched: Sequence[str]) -> dict[str, str]:
    """What the candidate's judge files must hold when its focused test starts: path ->
    the sha256 of the incumbent's file, or "" where the incumbent has none."""
    digests = {}
    for rel in judge_paths(m, inc_tree, touched):
        path = inc_tree / rel
        digests[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
    return digests


def scope_notes(declared: Sequence[str], restored: Sequence[str]) -> list[str]:
    """The lines a round's record carries about its declared scope and judge files."""
    notes = []
    if declared:
        notes.append("declared outside kernel_source (--allow-outside): " + ", ".join(declared))
    if restored:
        notes.append(
            "focused test from the lineage head: the candidate's "
            + ", ".join(restored)
            + " replaced by the incumbent's before the test ran"
        )
    return notes
