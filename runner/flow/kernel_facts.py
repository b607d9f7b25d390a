"""The kernel facts of a round's roles: each role's Triton kernels compiled ahead of time
for the arch the manifest names for facts (``facts_gpu``, gfx942 by default), on any
machine (docs/analysis.md).

The host may lack torch and triton, so every compile runs in a subprocess of its own
(``python -m runner.analyze.compile_main``, one per role and kernel file) with the role's
tree first on ``PYTHONPATH`` and a timeout, and what it writes is cached under
``cache_dir()/<key>`` (shared by the user's campaigns): the key hashes the kernel file's folder (its
kernels, config dicts and helpers), the case prefix and granularity, the arch, the
Triton version and the analyser's version.  ``FactsJob`` runs it in a thread beside the
measurement; a round waits for it only when it closes.

Which kernels: the Triton files among ``kernel_source``; where there is none (a TORCH
campaign, such as the CPU demo, whose device launches no Triton kernel), the target's
Triton files of the same op.  Their launches are the example package's wrappers called
as ``runner.analyze.example_cases`` records them, at the config dicts they name.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import shutil
import sys
import threading
from pathlib import Path
from typing import Any

from runner.core.errors import CommandFailed, InfrastructureError
from runner.core.files import write_atomic
from runner.core.isa_facts import ARCHS, warnings
from runner.core.processes import run
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest
from runner.targets.registry import get_target

ANALYZER_VERSION = "1"  # raise when the facts a compile records change
COMPILE_TIMEOUT_S = float(os.environ.get("TURBO_CAMPAIGN_FACTS_TIMEOUT_S", "300"))
ROLES = ("incumbent", "candidate")


def facts_arch(m: Manifest) -> str:
    """The arch whose facts a campaign records: ``facts_gpu``, else the target's GPU
    where the compiler has it, else gfx942."""
    if m.facts_gpu:
        return m.facts_gpu
    return m.target_gpu if m.target_gpu in ARCHS else "gfx942"


def triton_version() -> str | None:
    """The installed Triton's version, read without importing it (or torch)."""
    try:
        importlib.metadata.version("torch")
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def kernel_files(m: Manifest, tree: Path) -> list[str]:
    """The Triton files (``@triton.jit``) whose kernels a round's facts compile."""

    def triton_files(paths: tuple[str, ...] | list[str]) -> list[str]:
        found = []
        for rel in paths:
            path = tree / rel
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            if path.suffix == ".py" and "@triton.jit" in text:
                found.append(rel)
        return found

    own = triton_files(m.kernel_source)
    if own:
        return own
    code_map = get_target(m.target).code_map
    return triton_files(code_map.get((m.target_op, "TRITON"), ()))


def _prefix(rel: str) -> str:
    stem = Path(rel).stem
    return stem[: -len("_kernel")] if stem.endswith("_kernel") else stem


def cache_key(tree: Path, rel: str, m: Manifest, arch: str, triton: str) -> str:
    """What a compile's result depends on: the kernel file's folder, the case, the arch,
    the Triton version and this analyser's version."""
    h = hashlib.sha256()
    for path in sorted((tree / rel).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    for part in (_prefix(rel), m.granularity or "", arch, triton, ANALYZER_VERSION):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


CACHE_ENV = "TURBO_CAMPAIGN_FACTS_CACHE"


def cache_dir() -> Path:
    """Shared by every campaign of the user (the key holds all a compile depends on):
    ``$TURBO_CAMPAIGN_FACTS_CACHE``, else ``$XDG_CACHE_HOME/turbo-campaign/kernel-facts``."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "turbo-campaign" / "kernel-facts"


def _compile(campaign: Campaign, tree: Path, rel: str, arch: str, triton: str) -> Path:
    """The cache folder of one kernel file's compile, compiled now where it is missing."""
    m = campaign.manifest
    folder = cache_dir() / cache_key(tree, rel, m, arch, triton)
    if (folder / "facts.json").is_file():
        return folder
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []  # yield to the measurement
    cmd = [*nice, sys.executable, "-m", "runner.analyze.compile_main", "--prefix", _prefix(rel),
           "--arch", arch, "--out", str(tmp)]  # fmt: skip
    if m.granularity:
        cmd += ["--granularity", m.granularity]
    # nothing written into the role's tree (the round proves each tree unchanged)
    env = {**os.environ, "PYTHONPATH": tree_pythonpath(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    tmp.parent.mkdir(parents=True, exist_ok=True)
    try:
        run(cmd, env=env, cwd=tree, timeout=COMPILE_TIMEOUT_S, die_with_parent=True)
    except (CommandFailed, InfrastructureError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = str(exc).strip().splitlines()[-1:] or ["(no output)"]
        raise FactsUnavailable(f"{rel} did not compile for {arch}: {tail[0]}") from exc
    try:
        tmp.rename(folder)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return folder


def tree_pythonpath(tree: Path) -> str:
    """``tree`` first, then this runner's root and the caller's own entries (absolute:
    the subprocess runs in ``tree``)."""
    import runner

    root = str(Path(runner.__file__).resolve().parent.parent)
    inherited = [
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    return os.pathsep.join(dict.fromkeys([str(tree), root, *inherited]))


class FactsUnavailable(Exception):
    """A compile failed or timed out: the round records why instead of facts."""


def role_facts(campaign: Campaign, tree: Path, arch: str, triton: str) -> dict[str, Any]:
    """``{kernel: {case, config, facts, isa (path), file}}`` of one role's tree."""
    import json

    kernels: dict[str, Any] = {}
    for rel in kernel_files(campaign.manifest, tree):
        folder = _compile(campaign, tree, rel, arch, triton)
        doc = json.loads((folder / "facts.json").read_text(encoding="utf-8"))
        for name, entry in doc["kernels"].items():
            kernels[name] = {**entry, "file": rel, "isa": str(folder / entry["isa"])}
    return kernels


def round_facts(campaign: Campaign, trees: dict[str, Path]) -> dict[str, Any]:
    """The record of a round's facts: arch, Triton version, each role's kernels and the
    warnings of the candidate against the incumbent; ``note`` says why there are none."""
    arch = facts_arch(campaign.manifest)
    triton = triton_version()
    out: dict[str, Any] = {"arch": arch, "triton": triton, "roles": {}, "warnings": []}
    if triton is None:
        out["note"] = "no kernel facts: torch and triton are not installed beside the runner"
        return out
    if campaign.manifest.target != "example":
        out["note"] = f"no kernel facts: no launch recipes for target {campaign.manifest.target}"
        return out
    try:
        for role, tree in trees.items():
            out["roles"][role] = role_facts(campaign, tree, arch, triton)
    except (FactsUnavailable, OSError, ValueError) as exc:
        out["note"] = f"no kernel facts: {exc}"
        return out
    if not any(out["roles"].values()):
        out["note"] = "no kernel facts: the campaign's files hold no Triton kernel"
    out["warnings"] = _warnings(arch, out["roles"])
    return out


def _warnings(arch: str, roles: dict[str, Any]) -> list[str]:
    """Each candidate role's kernels against the incumbent's (one role: its own)."""
    inc = roles.get("incumbent", {})
    said = []
    for role in [r for r in roles if r != "incumbent"] or ["incumbent"]:
        for name, entry in roles.get(role, {}).items():
            old = inc.get(name, {}).get("facts") if role != "incumbent" else None
            said += [f"{name}: {w}" for w in warnings(arch, old, entry["facts"])]
    return said


def for_role(facts: dict[str, Any], role: str) -> dict[str, Any]:
    """The record of one candidate ``role`` of a measurement of several (a tournament's
    entry): the incumbent and that role as "candidate", with their warnings."""
    roles = facts.get("roles") or {}
    if role not in roles:
        return {**facts, "roles": {}, "warnings": []}
    pair = {"incumbent": roles.get("incumbent", {}), "candidate": roles[role]}
    return {**facts, "roles": pair, "warnings": _warnings(str(facts.get("arch")), pair)}


class FactsJob:
    """``round_facts`` in a thread beside the measurement; ``result`` waits for it."""

    def __init__(self, campaign: Campaign, trees: dict[str, Path]) -> None:
        self._out: dict[str, Any] = {}
        self._thread = threading.Thread(
            target=self._work, args=(campaign, dict(trees)), name="kernel-facts", daemon=True
        )
        self._thread.start()

    def _work(self, campaign: Campaign, trees: dict[str, Path]) -> None:
        try:
            self._out = round_facts(campaign, trees)
        except Exception as exc:  # never fail a round for its facts
            self._out = {"arch": facts_arch(campaign.manifest), "roles": {}, "warnings": [],
                         "note": f"no kernel facts: {type(exc).__name__}: {exc}"}  # fmt: skip

    def result(self, timeout: float = COMPILE_TIMEOUT_S * 2) -> dict[str, Any]:
        self._thread.join(timeout)
        if self._thread.is_alive():
            return {"roles": {}, "warnings": [], "note": "no kernel facts: the compile timed out"}
        return self._out


def save_isa(campaign: Campaign, n: int, facts: dict[str, Any]) -> list[Path]:
    """Each role's assembly into ``profiles/round-N/<role>/`` (``campaign isa`` diffs it)."""
    written = []
    for role, kernels in facts.get("roles", {}).items():
        for entry in kernels.values():
            src = Path(entry.get("isa", ""))
            if src.is_file():
                dest = campaign.profiles_dir / f"round-{n}" / role / src.name
                write_atomic(dest, src.read_text(encoding="utf-8"))
                entry["isa"] = str(dest.relative_to(campaign.root))
                written.append(dest)
    return written
