"""Each role's own JIT caches on the host (docs/reliability.md §7).

Triton, TorchInductor and the CUDA driver keep what they compile on disk and load it
again in the next process: left at their defaults (``~/.triton/cache``,
``/tmp/torchinductor_<user>``, ``~/.nv/ComputeCache``) every role of every round
shares them, so a candidate's process could plant an entry that the incumbent then
loads.  A local job instead gets a cache folder of its own role and tree content,
``<campaigns root>/.jit-cache/<role>-<content key>/``, which the job may write and
every other role's job sees read-only (``Round.readonly`` protects the whole
``.jit-cache`` folder, the local executor makes the job's own folder writable again).
Keyed by content, a tree measured again (the lineage head of the next round) finds
its kernels compiled; keyed by role, two roles never share a folder.

The variable names are Triton's (``python/triton/knobs.py`` of triton-lang/triton at
689edabdbe3b: ``TRITON_HOME``, and ``TRITON_CACHE_DIR``, ``TRITON_DUMP_DIR``,
``TRITON_OVERRIDE_DIR`` defaulting under it), TorchInductor's
``TORCHINDUCTOR_CACHE_DIR`` (torch 2.13 ``_inductor/runtime/cache_dir_utils.py``)
and the CUDA driver's ``CUDA_CACHE_PATH``.  Docker jobs
keep their per-role cache volumes instead (``runner.executors.docker_args``).
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from runner.core.processes import run

JIT_CACHE_DIR = ".jit-cache"


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


def jit_env(folder: Path) -> dict[str, str]:
    """The environment that points every JIT cache of a job at ``folder``."""
    return {
        "TRITON_HOME": str(folder),
        "TRITON_CACHE_DIR": str(folder / "triton"),
        "TRITON_DUMP_DIR": str(folder / "triton-dump"),
        "TRITON_OVERRIDE_DIR": str(folder / "triton-override"),
        "TORCHINDUCTOR_CACHE_DIR": str(folder / "inductor"),
        "CUDA_CACHE_PATH": str(folder / "cuda"),
    }
