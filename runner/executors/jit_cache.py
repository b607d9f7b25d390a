"""Each role's own JIT caches on the host (docs/reliability.md §7).

Triton, TorchInductor and the CUDA driver keep what they compile on disk and load it
again in the next process: left at their defaults (``~/.triton/cache``,
``/tmp/torchinductor_<user>``, ``~/.nv/ComputeCache``) every role of every round
shares them, so a candidate's process could plant an entry that the incumbent then
loads.  A local job instead gets a cache folder of its own role and tree content,
``<campaigns root>/.jit-cache/<role>-<content key>/``, which the job may write and
every other role's job sees read-only (``RoundPlan.readonly`` protects the whole
``.jit-cache`` folder, the local executor makes the job's own folder writable again).
Keyed by content, a tree measured again (the lineage head of the next round) finds
its kernels compiled; keyed by role, two roles never share a folder.

The variable names are Triton's (``python/triton/knobs.py`` of triton-lang/triton at
689edabdbe3b: ``TRITON_HOME``, and ``TRITON_CACHE_DIR``, ``TRITON_DUMP_DIR``,
``TRITON_OVERRIDE_DIR`` defaulting under it), TorchInductor's
``TORCHINDUCTOR_CACHE_DIR`` (torch 2.13 ``_inductor/runtime/cache_dir_utils.py``)
and the CUDA driver's ``CUDA_CACHE_PATH``.  Docker jobs
keep their per-role cache volumes instead (``runner.executors.docker_args``).

Triton's autotune results are kept in the same folder (``TRITON_CACHE_AUTOTUNING``,
``AUTOTUNE_ENV``; Triton keys them by the kernel's source, the configs left after
pruning and the tuning key's values): the first worker of a role times every config
while it holds its device alone (``runner.core.prepare_lock``) and the role's other
workers, and the lineage head's next rounds, run its choice instead of timing 64-96
configs again each, on a device the others share (docs/measurement.md §3).

A role's new folder does not start empty: it starts as a copy of the most recently used
folders of the lineage's roles (``seed``: the baseline, the incumbent and acceptance's
final, whose jobs run only the lineage's own code), so a candidate, a new lineage head
or a tournament's entries find every kernel the change did not touch compiled (the
caches key their entries by the kernel's source).  A copy, never a link: the folder is
the job's to write, and what it writes must not reach the folder it was copied from.
No folder of a candidate is ever copied.

The folders hold at most ``limit_bytes`` together (``TURBO_CAMPAIGN_JIT_CACHE_GB``,
default 20): when a round takes a folder (``claim``) it then prunes the least
recently used ones beyond the limit (``prune``, through the build cache's
``runner.executors.lru.over_limit``).  A claim is a file under ``.claims/`` naming the
round's scratch folder; it holds as long as that folder exists (the round removes it
when it ends, the next command of its campaign when it was killed), and a claimed
folder is never pruned.  Claims and prunes take the root's lock, so a folder is
claimed before it is used and never pruned after.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import threading
from pathlib import Path

from runner.core.files import write_atomic
from runner.core.processes import run
from runner.executors.lru import locked, over_limit, size_limit

JIT_CACHE_DIR = ".jit-cache"
LIMIT_ENV = "TURBO_CAMPAIGN_JIT_CACHE_GB"
DEFAULT_LIMIT_GB = 20.0
CLAIMS = ".claims"


def limit_bytes() -> int:
    return size_limit(LIMIT_ENV, DEFAULT_LIMIT_GB)


def jit_root(campaigns_root: Path) -> Path:
    return Path(campaigns_root).resolve() / JIT_CACHE_DIR


def content_key(tree: Path) -> str:
    """A tree's content in 16 hex digits: its HEAD, its diff against HEAD and every
    untracked file git does not ignore (build products aside: what the tree's native
    and build files, already in this, make)."""

    def git(*args: str) -> bytes:
        return (run(["git", *args], cwd=tree).stdout or "").encode("utf-8", "surrogateescape")

    digest = hashlib.sha256(git("rev-parse", "HEAD"))
    digest.update(git("diff", "HEAD", "--binary"))
    listed = git("ls-files", "--others", "--exclude-standard", "-z").decode().split("\0")
    for rel in sorted(p for p in listed if p):
        path = tree / rel
        digest.update(rel.encode("utf-8") + b"\0")
        if path.is_file() and not path.is_symlink():
            digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def role_folder(root: Path, role: str, key: str) -> Path:
    """The role's own cache folder for the tree of ``key`` (the executor that uses it
    creates it)."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", role) or "role"
    return root / f"{safe}-{key}"


# Triton's switch that keeps each autotune result on disk beside the compiled kernels
AUTOTUNE_ENV = {"TRITON_CACHE_AUTOTUNING": "1"}


def jit_env(folder: Path) -> dict[str, str]:
    """The environment that points every JIT cache of a job, its autotune results
    included, at ``folder``."""
    return {
        **AUTOTUNE_ENV,
        "TRITON_HOME": str(folder),
        "TRITON_CACHE_DIR": str(folder / "triton"),
        "TRITON_DUMP_DIR": str(folder / "triton-dump"),
        "TRITON_OVERRIDE_DIR": str(folder / "triton-override"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
        "CUDA_CACHE_PATH": str(folder / "cuda"),
    }


LINEAGE_ROLES = ("baseline", "incumbent", "final")  # their jobs run the lineage's code
SEED_FOLDERS = 3  # a new folder copies at most this many lineage folders, newest first


def seed(root: Path, folder: Path) -> list[str]:
    """Fill ``folder`` (under ``root``), when it does not exist yet, with copies of the
    ``SEED_FOLDERS`` most recently used folders of ``LINEAGE_ROLES`` (never one of a
    candidate), newest first, a file already copied kept; returns their names.  The
    copy is made aside and renamed into place, so a killed copy leaves no half folder
    in use."""
    with locked(root):
        if folder.exists() or not root.is_dir():
            return []
        sources = [
            p
            for p in root.iterdir()
            if p.is_dir()
            and not p.name.startswith(".")
            and p != folder
            and p.name.rsplit("-", 1)[0] in LINEAGE_ROLES
        ]
        sources.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        sources = sources[:SEED_FOLDERS]
        if not sources:
            return []
        aside = root / f".seeding-{folder.name}-{os.getpid()}"
        shutil.rmtree(aside, ignore_errors=True)
        try:
            for source in sources:
                shutil.copytree(
                    source, aside, symlinks=True, dirs_exist_ok=True, copy_function=_copy_new
                )
            try:
                os.rename(aside, folder)
            except OSError:
                if not folder.is_dir():  # a job made it meanwhile: it is the role's
                    raise
                return []
        finally:
            shutil.rmtree(aside, ignore_errors=True)
    return [p.name for p in sources]


def _copy_new(src: str, dst: str) -> None:
    """Copy ``src`` to ``dst`` unless a newer seed folder gave ``dst`` already."""
    if not os.path.lexists(dst):
        shutil.copy2(src, dst)


def claim(root: Path, folder: Path, holder: Path) -> None:
    """Mark ``folder`` (under ``root``) as used by the round whose scratch folder is
    ``holder`` for as long as ``holder`` exists, and as just used (its mtime)."""
    token = hashlib.sha256(str(holder.resolve()).encode("utf-8")).hexdigest()[:16]
    with locked(root):
        write_atomic(root / CLAIMS / f"{folder.name}.{token}", f"{holder.resolve()}\n")
        if folder.is_dir():
            os.utime(folder)


def _claimed(root: Path) -> set[str]:
    """The folders a live round claimed; the claims of rounds that are gone removed."""
    live = set()
    for path in sorted((root / CLAIMS).glob("*")) if (root / CLAIMS).is_dir() else []:
        with contextlib.suppress(OSError, UnicodeDecodeError):
            if Path(path.read_text("utf-8").strip()).is_dir():
                live.add(path.name.rsplit(".", 1)[0])
                continue
        path.unlink(missing_ok=True)
    return live


def _size(folder: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def prune(root: Path, limit: int | None = None) -> list[str]:
    """Remove the least recently used folders beyond ``limit`` (default
    ``limit_bytes``), never one a live round claimed; returns the names removed."""
    limit = limit_bytes() if limit is None else limit
    if not root.is_dir():
        return []
    with locked(root):
        keep = _claimed(root)
        folders = [p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")]
        folders.sort(key=lambda p: p.stat().st_mtime, reverse=True)
        gone = over_limit([(p.name, _size(p)) for p in folders], limit, keep)
        for name in gone:
            shutil.rmtree(root / name, ignore_errors=True)
    return gone


class JitFolders:
    """The JIT cache folder of each (role, tree) of one round, as its first job of the
    role found it: taking a folder claims it for the round (``claim``, its claim file
    naming the round's scratch folder), seeds a new one (``seed``) and prunes the
    others (``prune``), which must happen once, not at every job; so a round's plan
    holds one of these and the plans made from it share it, and one with a scratch
    folder of its own (a tournament entry's confirmation) starts a new one."""

    def __init__(self) -> None:
        self._folders: dict[tuple[str, Path], Path] = {}
        self._lock = threading.Lock()  # shards start their workers in threads

    def folder(self, role: str, tree: Path, campaigns_root: Path, holder: Path) -> Path:
        """``role``'s folder for ``tree``'s content under ``campaigns_root``, claimed for
        ``holder`` (the round's scratch folder) the first time."""
        with self._lock:
            if (role, tree) not in self._folders:
                root = jit_root(campaigns_root)
                folder = role_folder(root, role, content_key(tree))
                claim(root, folder, holder)
                seed(root, folder)
                prune(root)
                self._folders[(role, tree)] = folder
            return self._folders[(role, tree)]
