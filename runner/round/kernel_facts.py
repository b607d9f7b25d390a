"""The kernel facts of a round's roles: each role's Triton kernels compiled ahead of time
for the arch the manifest names for facts (``facts_gpu``, gfx942 by default), on any
machine (docs/analysis.md).

The host may lack torch and triton, so every compile runs in a subprocess of its own
(``python -m runner.worker.analyze.compile_main``, one per role and kernel file) with the role's
tree first on ``PYTHONPATH`` and a timeout, and what it writes is cached under
``cache_dir()/<key>`` (shared by the user's campaigns): the key hashes the kernel file's folder (its
kernels, config dicts and helpers), the case prefix and granularity, the arch, the
Triton version and the analyser's version.  ``FactsJob`` runs it in a thread beside the
measurement; a round waits for it only when it closes.

Which kernels: the Triton files among ``kernel_source``; where there is none (a TORCH
campaign, such as the CPU demo, whose device launches no Triton kernel), the target's
Triton files of the same op.  Their launches are the target's launch recipes: the example
package's wrappers as ``runner.worker.analyze.example_cases`` records them, at the config dicts
they name; Primus-Turbo's op calls as ``runner.worker.analyze.primus_turbo_cases`` makes them, at
the configs upstream's code picks (its autotune lists' first configs, its keyword
constexprs and knobs).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import shutil
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from runner.core.errors import CommandFailed, InfrastructureError, LdsOverLimit
from runner.core.files import write_atomic
from runner.core.isa_facts import ARCHS, KernelEntry, KernelFacts, Kernels
from runner.core.processes import run
from runner.core.step_times import StepTimes
from runner.round.context import RoundPlan
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest
from runner.store.workspace import code_root
from runner.targets.registry import get_target

ANALYZER_VERSION = "2"  # raise when the facts a compile records change
COMPILE_TIMEOUT_S = float(os.environ.get("TURBO_CAMPAIGN_FACTS_TIMEOUT_S", "300"))
ROLES = ("incumbent", "candidate")
# compiles at a time: each is one process on one core
FACTS_WORKERS = int(os.environ.get("TURBO_CAMPAIGN_FACTS_WORKERS") or min(2, os.cpu_count() or 1))


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
    """What a compile's result depends on, as far as the host knows before it: the
    kernel file's folder, the target, op and case, the arch, the Triton version and this
    analyser's version.  The files of the tree the compile imported beyond that (launch
    sites, helpers) are its ``deps``, checked on each lookup (``_cached``)."""
    h = hashlib.sha256()
    for path in sorted((tree / rel).parent.glob("*.py")):
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    parts = (m.target, m.target_op, rel, _prefix(rel), m.granularity or "", arch, triton)
    for part in (*parts, ANALYZER_VERSION):
        h.update(part.encode() + b"\0")
    return h.hexdigest()[:24]


def _deps_hold(tree: Path, deps: dict[str, str]) -> bool:
    for rel, digest in deps.items():
        path = tree / rel
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            return False
    return True


def _cached(folder: Path, tree: Path) -> Path | None:
    """The compile under ``folder`` whose recorded deps ``tree`` still has."""
    import json

    for sub in sorted(folder.glob("*/facts.json")) if folder.is_dir() else []:
        doc = json.loads(sub.read_text(encoding="utf-8"))
        if _deps_hold(tree, doc.get("deps") or {}):
            return sub.parent
    return None


CACHE_ENV = "TURBO_CAMPAIGN_FACTS_CACHE"


def cache_dir() -> Path:
    """Shared by every campaign of the user (the key holds all a compile depends on):
    ``$TURBO_CAMPAIGN_FACTS_CACHE``, else ``$XDG_CACHE_HOME/turbo-campaign/kernel-facts``."""
    given = os.environ.get(CACHE_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "turbo-campaign" / "kernel-facts"


# What runs a compile process (it imports the measured tree's code): a round's
# ``RoundPlan.isolate``, which protects everything but the compile's output; None: as it is.
Guard = Callable[[Sequence[str], Path, Sequence[Path]], list[str]]


def _compile(
    campaign: Campaign, tree: Path, rel: str, target: tuple[str, str], guard: Guard | None
) -> Path:
    """The cache folder of one kernel file's compile (``target``: the arch and the
    Triton version), compiled now where it is missing."""
    arch, triton = target
    m = campaign.manifest
    folder = cache_dir() / cache_key(tree, rel, m, arch, triton)
    hit = _cached(folder, tree)
    if hit is not None:
        return hit
    tmp = folder.with_name(folder.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []  # yield to the measurement
    cmd = [
        *nice,
        sys.executable,
        "-m",
        "runner.worker.analyze.compile_main",
        "--target",
        m.target,
        "--file",
        rel,
        "--op",
        m.target_op,
        "--prefix",
        _prefix(rel),
        "--arch",
        arch,
        "--out",
        str(tmp),
        "--triton-cache",
        str(cache_dir() / "triton"),
    ]
    if m.granularity:
        cmd += ["--granularity", m.granularity]
    # nothing written into the role's tree (the round proves each tree unchanged)
    env = {**os.environ, "PYTHONPATH": tree_pythonpath(tree), "PYTHONDONTWRITEBYTECODE": "1"}
    tmp.parent.mkdir(parents=True, exist_ok=True)
    argv = guard(cmd, tree, [cache_dir()]) if guard is not None else cmd
    try:
        run(argv, env=env, cwd=tree, timeout=COMPILE_TIMEOUT_S, die_with_parent=True)
    except (CommandFailed, InfrastructureError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        tail = str(exc).strip().splitlines()[-1:] or ["(no output)"]
        raise _FactsUnavailable(f"{rel} did not compile for {arch}: {tail[0]}") from exc
    done = json.loads((tmp / "facts.json").read_text(encoding="utf-8"))
    deps = json.dumps(done.get("deps") or {}, sort_keys=True).encode()
    dest = folder / hashlib.sha256(deps).hexdigest()[:16]  # one compile per set of deps
    folder.mkdir(parents=True, exist_ok=True)
    try:
        tmp.rename(dest)
    except OSError:  # another process cached it first
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def tree_pythonpath(tree: Path) -> str:
    """Where ``tree``'s package lives first (``code_root``: ``src/`` of a workspace, whose
    kernel files import ``primus_turbo`` from there), the tree itself, then this runner's
    root and the caller's own entries (absolute: the subprocess runs in ``tree``)."""
    import runner

    root = str(Path(runner.__file__).resolve().parent.parent)
    inherited = [
        str(Path(p).resolve()) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p
    ]
    return os.pathsep.join(dict.fromkeys([str(code_root(tree)), str(tree), root, *inherited]))


class _FactsUnavailable(Exception):
    """A compile failed or timed out: the round records why instead of facts."""


def _compiled_all(
    campaign: Campaign, trees: dict[str, Path], target: tuple[str, str], guard: Guard | None
) -> dict[tuple[str, str], Path]:
    """Every role's kernel files compiled (or found in the cache), ``FACTS_WORKERS`` at a
    time in the order of the roles (the incumbent first: a later role's unchanged
    kernels then hit Triton's cache); ``{(role, file): folder}``."""
    from concurrent.futures import ThreadPoolExecutor

    jobs = [
        (role, rel) for role, tree in trees.items() for rel in kernel_files(campaign.manifest, tree)
    ]
    with ThreadPoolExecutor(max_workers=FACTS_WORKERS) as pool:
        futures = {
            job: pool.submit(_compile, campaign, trees[job[0]], job[1], target, guard)
            for job in jobs
        }
        return {job: future.result() for job, future in futures.items()}


def role_facts(folders: dict[str, Path]) -> tuple[Kernels, list[str]]:
    """``{kernel: entry}`` of one role's tree from its compiles (``folders``: kernel file
    -> cache folder; each entry's ``isa`` the path of its assembly there), and the notes
    they wrote (no recipe for the op, modules stood in for)."""
    kernels: Kernels = {}
    notes: list[str] = []
    for rel, folder in folders.items():
        doc = json.loads((folder / "facts.json").read_text(encoding="utf-8"))
        if doc.get("note"):
            notes.append(doc["note"])
        for name, entry in doc["kernels"].items():
            isa = (folder / str(entry.get("isa") or "")).resolve()
            # the compile imported the tree's code: only a file of its own folder is kept
            inside = isa.is_file() and isa.is_relative_to(folder.resolve())
            kernels[name] = KernelEntry.from_dict(
                {**entry, "isa": str(isa) if inside else ""}, file=rel
            )
        if doc.get("stood_in"):
            notes.append(f"{rel}: stood in for {', '.join(doc['stood_in'])}")
    return kernels, notes


def round_facts(
    campaign: Campaign, trees: dict[str, Path], guard: Guard | None = None
) -> KernelFacts:
    """The record of a round's facts: arch, Triton version, each role's kernels and the
    warnings of the candidate against the incumbent; ``note`` says why there are none.
    ``guard``: how each compile process is run (a round's: isolated, ``RoundPlan.isolate``)."""
    arch = facts_arch(campaign.manifest)
    triton = triton_version()
    if triton is None:
        return KernelFacts.none(arch, None, "torch and triton are not installed beside the runner")
    notes: list[str] = []
    roles: dict[str, Kernels] = {}
    try:
        compiled = _compiled_all(campaign, trees, (arch, triton), guard)
        for role in trees:
            mine = {rel: folder for (r, rel), folder in compiled.items() if r == role}
            roles[role], said = role_facts(mine)
            notes += [n for n in said if n not in notes]
    except (_FactsUnavailable, OSError, ValueError) as exc:
        return KernelFacts.none(arch, triton, str(exc))
    if not any(roles.values()):
        why = notes[0] if notes else "the campaign's files hold no Triton kernel"
        return KernelFacts(arch, triton, roles, note=f"no kernel facts: {why}")
    return KernelFacts(arch, triton, roles, note="; ".join(notes) or None).judged()


class FactsJob:
    """``round_facts`` of a round's trees in a thread beside its measurement, each
    compile isolated as the round's jobs are (``RoundPlan.isolate``, the other trees
    read-only: ``RoundPlan.guarding``), whether or not the builds have begun; ``result``
    waits."""

    def __init__(self, rnd: RoundPlan, trees: dict[str, Path]) -> None:
        campaign = rnd.campaign
        self._arch = facts_arch(campaign.manifest)
        self._out = KernelFacts.none(self._arch, None, "the compile did not finish")
        self._result: KernelFacts | None = None
        self._thread = threading.Thread(
            target=self._work,
            args=(campaign, dict(trees), rnd.guarding(trees).isolate, rnd.times),
            name="kernel-facts",
            daemon=True,
        )
        self._thread.start()

    def _work(
        self, campaign: Campaign, trees: dict[str, Path], guard: Guard, times: StepTimes
    ) -> None:
        try:
            with times.step("kernel facts compile", beside="the round"):
                self._out = round_facts(campaign, trees, guard)
        except Exception as exc:  # never fail a round for its facts
            self._out = KernelFacts.none(self._arch, None, f"{type(exc).__name__}: {exc}")

    def refuse_over_lds(self) -> None:
        """On an AMD target, wait for the facts and refuse the round before anything is
        timed when a candidate kernel is over the arch's LDS limit (``LdsOverLimit``,
        naming the kernel and its bytes): there such a launch may run and read garbage.
        A NVIDIA target fails that launch itself (OutOfResources), so nothing waits."""
        arch = ARCHS.get(self._arch)
        if arch is not None and arch.backend == "hip":
            refuse_over_lds(self.result())

    def result(self, timeout: float = COMPILE_TIMEOUT_S * 2) -> KernelFacts:
        """The facts, waited for up to ``timeout`` the first time; the same answer on
        every later call (a round waits while its trees exist, then records it)."""
        if self._result is None:
            self._thread.join(timeout)
            late = KernelFacts.none(self._arch, None, "the compile timed out")
            self._result = late if self._thread.is_alive() else self._out
        return self._result


def refuse_over_lds(facts: KernelFacts) -> None:
    """``LdsOverLimit`` naming each candidate kernel over its arch's LDS limit, with its
    bytes; nothing when all fit (or the facts could not be made: their note says so)."""
    over = facts.over_lds("candidate")
    if over:
        raise LdsOverLimit(
            "refused before it was measured: the candidate's kernels need more LDS "
            f"than {facts.arch} has: " + "; ".join(over) + ". Shrink the tile or the "
            "stages (BLOCK_*, num_stages) so each kernel fits, then validate again."
        )


def save_isa(campaign: Campaign, n: int, facts: KernelFacts) -> KernelFacts:
    """Each role's assembly into ``profiles/round-N/<role>/`` (``campaign isa`` diffs
    it); returns ``facts`` with each saved entry's ``isa`` relative to the campaign (a
    tournament's entries share the incumbent's entries: none is changed in place)."""
    roles: dict[str, Kernels] = {}
    for role, kernels in facts.roles.items():
        roles[role] = {}
        for name, entry in kernels.items():
            src = Path(entry.isa)
            if entry.isa and src.is_absolute() and src.is_file():
                dest = campaign.profiles_dir / f"round-{n}" / role / src.name
                write_atomic(dest, src.read_text(encoding="utf-8"))
                entry = replace(entry, isa=str(dest.relative_to(campaign.root)))
            roles[role][name] = entry
    return replace(facts, roles=roles)
