"""The build cache of native targets: a role's build is made once per build key.

The key (``build_key``) is what determines a build: the content of the tree's native
and build files (``Target.needs_rebuild`` names them) and its submodule commits, the
GPU architectures, the build commands, what the build reads from its environment
(``Target.build_facts``), and the build environment's identity (the
image id in docker, the compiler and Python locally: ``Executor.build_identity``).
Two trees that differ in any native or build file get different keys, so they never
share a build; trees that differ only in Python files share it, each with its own
Python files.

An entry is a folder ``<campaigns root>/.build-cache/<key>/``:

* ``entry.json``: the key, the executor, what was built (campaign, round, role, the
  inputs of the key), its size, and for docker the image tag holding the built tree;
* ``products/`` (local): the files the build added to the tree, and
  ``products.sha256`` (their checksums);
* ``complete``: written last, the sha256 of ``entry.json`` and ``products.sha256``.

An entry is written in a temporary folder and renamed into place, so a reader sees a
whole entry or none.  ``lookup`` refuses (and removes) an entry whose marker is missing
or does not match; ``verify_products`` re-hashes a local entry's files before they are
used, so a corrupted entry is rebuilt, never used (docker checks the image's own
checksums inside the container).  The cache holds at most ``limit_bytes``
(``TURBO_CAMPAIGN_BUILD_CACHE_GB``, default 40): after each new entry the least
recently used ones are evicted.  ``campaign status`` lists the entries
(``status_lines``); docs/primus-turbo.md says how to clear it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from runner.core.files import sha256_file, write_atomic
from runner.core.processes import run
from runner.executors.lru import locked, over_limit, size_limit

CACHE_DIR = ".build-cache"
LIMIT_ENV = "TURBO_CAMPAIGN_BUILD_CACHE_GB"
DEFAULT_LIMIT_GB = 40.0
ENTRY = "entry.json"
PRODUCTS = "products"
SUMS = "products.sha256"
COMPLETE = "complete"
USED = "used"
STALE_TMP_S = 86400.0


def tree_files(tree: Path) -> list[str]:
    """Every file of ``tree`` (relative paths, sorted), ``.git`` and bytecode aside."""
    found = []
    for dirpath, dirnames, filenames in os.walk(tree):
        dirnames[:] = [d for d in dirnames if d not in (".git", "__pycache__")]
        rel = Path(dirpath).relative_to(tree)
        found += [str(rel / f) if str(rel) != "." else f for f in filenames if f != ".git"]
    return sorted(found)


def native_inputs(tree: Path, is_native: Callable[[str], bool]) -> dict[str, str]:
    """The tree's native and build files (path -> sha256) and its submodule commits
    (path -> ``commit <sha>``): what of the tree a build depends on."""
    inputs = {p: sha256_file(tree / p) for p in tree_files(tree) if is_native(p)}
    staged = run(["git", "ls-files", "-s", "-z"], cwd=tree).stdout or ""
    for entry in staged.split("\0"):
        meta, _, path = entry.partition("\t")
        fields = meta.split()
        if len(fields) == 3 and fields[0] == "160000":  # a gitlink: a submodule
            inputs[path] = f"commit {fields[1]}"
    return dict(sorted(inputs.items()))


def build_key(
    inputs: dict[str, str],
    *,
    gpu_archs: str | None,
    commands: Sequence[Sequence[str]],
    identity: str,
    facts: Mapping[str, object] | None = None,
) -> str:
    """The sha256 of everything that determines a build.  ``facts``: what the build
    reads from its environment (``Target.build_facts``: for Primus-Turbo GPU_ARCHS,
    PRIMUS_TURBO_BUILD_CK and PRIMUS_TURBO_FRAMEWORK as its setup.py parses them)."""
    what: dict[str, object] = {
        "native": inputs,
        "gpu_archs": gpu_archs,
        "commands": [list(c) for c in commands],
        "identity": identity,
    }
    if facts:  # keys made before facts were keyed stay the same for targets without
        what["facts"] = facts
    text = json.dumps(what, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def limit_bytes() -> int:
    return size_limit(LIMIT_ENV, DEFAULT_LIMIT_GB)


class EntryInfo(TypedDict, total=False):
    """A cache entry's ``ENTRY`` record: what built it (``store``'s caller), its size."""

    key: str
    executor: str
    image: str
    campaign_image: str
    size_bytes: int
    built_from: str


@dataclass(frozen=True)
class Entry:
    key: str
    path: Path
    info: EntryInfo

    @property
    def image(self) -> str | None:
        image = self.info.get("image")
        return str(image) if image else None

    @property
    def size(self) -> int:
        return int(self.info.get("size_bytes", 0))

    @property
    def last_used(self) -> float:
        stamp = self.path / USED
        return stamp.stat().st_mtime if stamp.exists() else 0.0

    def products(self) -> dict[str, str]:
        sums = self.path / SUMS
        data: dict[str, str] = json.loads(sums.read_text("utf-8")) if sums.is_file() else {}
        return data

    def describe(self) -> str:
        what = self.info.get("built_from", "?")
        where = f"image {self.image}" if self.image else f"{len(self.products())} files"
        used = time.strftime("%Y-%m-%d %H:%M", time.gmtime(self.last_used))
        return (
            f"{self.info.get('executor', '?')}, {_size(self.size)} ({where}), "
            f"built from {what}, last used {used} UTC"
        )


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n < (1 << 30) else f"{n / (1 << 30):.2f} GiB"


def _read(path: Path) -> EntryInfo:
    data: EntryInfo = json.loads((path / ENTRY).read_text("utf-8"))
    return data


def _marker(path: Path) -> str:
    digest = hashlib.sha256((path / ENTRY).read_bytes())
    if (path / SUMS).is_file():
        digest.update((path / SUMS).read_bytes())
    return digest.hexdigest()


class BuildCache:
    """The entries under ``root`` (``<campaigns root>/.build-cache``); every change
    holds the cache's lock (campaigns on one host share it)."""

    def __init__(self, root: Path, limit: int | None = None) -> None:
        self.root = Path(root)
        self.limit = limit_bytes() if limit is None else limit

    @classmethod
    def for_campaign(cls, campaign_root: Path) -> BuildCache:
        return cls(Path(campaign_root).resolve().parent / CACHE_DIR)

    def locked(self) -> contextlib.AbstractContextManager[None]:
        return locked(self.root)

    def lookup(self, key: str) -> tuple[Entry | None, str]:
        """The whole, intact entry of ``key`` (marked used), or None and why there is
        none: absent, or half-written or corrupted (then it is removed).  A local
        entry's files are re-hashed against their checksums first."""
        path = self.root / key
        with self.locked():
            if not path.is_dir():
                return None, "not in the build cache"
            problem = self._check(path)
            entry = None if problem else Entry(key, path, _read(path))
            problem = problem or (self._verify_products(entry) if entry else "")
            if problem:
                self._remove(path)
                return None, f"the cached build was unusable ({problem}) and was removed"
            (path / USED).touch()
            return entry, ""

    @staticmethod
    def _check(path: Path) -> str:
        marker = path / COMPLETE
        if not marker.is_file() or not (path / ENTRY).is_file():
            return "half-written: no completion marker"
        if marker.read_text("utf-8").strip() != _marker(path):
            return "its completion marker does not match its contents"
        return ""

    @staticmethod
    def _verify_products(entry: Entry) -> str:
        """Re-hash a local entry's files against their checksums: '' when intact."""
        for rel, digest in entry.products().items():
            path = entry.path / PRODUCTS / rel
            if not path.is_file():
                return f"{rel} is missing"
            if sha256_file(path) != digest:
                return f"{rel} does not match its checksum"
        return ""

    def remove(self, key: str) -> None:
        with self.locked():
            self._remove(self.root / key)

    def _remove(self, path: Path) -> None:
        image = None
        with contextlib.suppress(OSError, ValueError):
            image = json.loads((path / ENTRY).read_text("utf-8")).get("image")
        if image:
            run(["docker", "image", "rm", "--force", image], check=False)
        shutil.rmtree(path, ignore_errors=True)

    def store(
        self,
        key: str,
        info: EntryInfo,
        *,
        tree: Path | None = None,
        products: Sequence[str] = (),
        keep: Sequence[str] = (),
    ) -> Entry:
        """Write the entry of ``key``: ``products`` copied from ``tree`` (local) or only
        ``info`` (docker: its ``image``), the completion marker last, then evict the
        least recently used entries beyond the limit (never those in ``keep``)."""
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = self.root / f".tmp-{key[:16]}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            sums = {}
            size = 0
            for rel in products:
                src, dest = Path(tree or ".") / rel, tmp / PRODUCTS / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest)
                sums[rel] = sha256_file(dest)
                size += dest.stat().st_size
            if tree is not None:
                write_atomic(tmp / SUMS, json.dumps(sums, indent=1, sort_keys=True) + "\n")
            record: EntryInfo = {"key": key, **info}
            record.setdefault("size_bytes", size)
            write_atomic(tmp / ENTRY, json.dumps(record, indent=2, sort_keys=True) + "\n")
            (tmp / USED).touch()
            write_atomic(tmp / COMPLETE, _marker(tmp) + "\n")  # last: the entry is whole
            with self.locked():
                final = self.root / key
                if final.exists():  # another round stored it meanwhile, or a bad one
                    self._remove(final)
                os.rename(tmp, final)
                self._evict({key, *keep})
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return Entry(key, self.root / key, record)

    def entries(self) -> list[Entry]:
        """The whole entries, most recently used first."""
        if not self.root.is_dir():
            return []
        found = []
        for path in self.root.iterdir():
            if path.name.startswith(".") or self._check(path):
                continue
            found.append(Entry(path.name, path, _read(path)))
        return sorted(found, key=lambda e: e.last_used, reverse=True)

    def _evict(self, keep: set[str]) -> None:
        for tmp in self.root.glob(".tmp-*"):  # a writer killed a day or more ago
            if time.time() - tmp.stat().st_mtime > STALE_TMP_S:
                shutil.rmtree(tmp, ignore_errors=True)
        for key in over_limit([(e.key, e.size) for e in self.entries()], self.limit, keep):
            self._remove(self.root / key)

    def status_lines(self) -> list[tuple[str, str]]:
        """``campaign status``: what the cache holds, one line per entry (nothing when
        no native build was ever made under this campaigns root)."""
        if not self.root.is_dir():
            return []
        entries = self.entries()
        total = sum(e.size for e in entries)
        head = (
            f"{self.root}: {len(entries)} entries, {_size(total)} of {_size(self.limit)} "
            f"(clear: rm -rf {self.root})"
        )
        return [("build cache", head), *((f"build {e.key[:12]}", e.describe()) for e in entries)]
