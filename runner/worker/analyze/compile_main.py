"""``python -m runner.worker.analyze.compile_main --target T --file F --op O --prefix P
[--granularity G] --arch A --out DIR``, run in the measured tree: compile the kernels of
the kernel file ``F`` for ``A`` at the launches the target's recipes make, and write into
``DIR`` each kernel's assembly (``<kernel>.amdgcn`` or ``.ptx``, the recipe's step added
where a kernel has several launches) and ``facts.json``
(its facts, config, and ``deps``: the hash of every file of the tree the process
imported, which the host's cache checks).

* ``example``: the first case of each kernel of the file (``P``: its name without
  ``_kernel``, e.g. ``gemm_fp8``; ``runner.worker.analyze.example_cases``);
* ``primus-turbo``: the launches of the op's recipe (``runner.worker.analyze.primus_turbo_cases``)
  whose kernel is defined in ``F``, each distinct specialisation once.

A target or op without recipes writes ``facts.json`` with a ``note`` and no kernels.
The measured tree comes first on ``PYTHONPATH``; the host (``runner.round.kernel_facts``)
starts one such process per role and kernel file, with a timeout, and caches what it
wrote.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, SupportsInt

from runner.core.files import write_atomic, write_json_atomic
from runner.core.isa_facts import Facts, parse_amdgcn, parse_ptx
from runner.core.processes import run

if TYPE_CHECKING:
    from collections.abc import Mapping

    from runner.worker.analyze.example_cases import Case
    from runner.worker.analyze.launch_log import Recorded
    from runner.worker.analyze.launches import CompiledKernel, JitKernel, Launch, Target


def _ptxas(ptx: str, arch: int | str) -> str:
    """``ptxas -v``'s report (registers, spills, stack) where Triton ships a ptxas."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        tool = get_ptxas(int(arch))  # Triton 3.6: the ptxas for that arch
        path = getattr(tool, "path", tool)
    except Exception:  # no NVIDIA backend or no bundled ptxas: PTX counts only
        return ""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "k.ptx"
        write_atomic(src, ptx)
        done = run(
            [str(path), "-v", f"--gpu-name=sm_{arch}a", str(src), "-o", str(src) + ".o"],
            check=False,
            timeout=120,
        )
    return done.stdout or ""


def _facts(
    compiled: CompiledKernel, target: Target, config: Mapping[str, object]
) -> tuple[str, str, Facts]:
    num_warps = config.get("num_warps", 4)  # an int: Triton's compile took it
    warps = int(num_warps) if isinstance(num_warps, SupportsInt) else 4
    if target.backend == "hip":
        text = compiled.asm["amdgcn"]
        shared = int(compiled.metadata.shared)
        return "amdgcn", text, parse_amdgcn(text, str(target.arch), warps, shared)
    text = compiled.asm["ptx"]
    facts = parse_ptx(text, int(compiled.metadata.shared), _ptxas(text, target.arch))
    return "ptx", text, facts


def _selected(prefix: str, granularity: str | None) -> list[Case]:
    """The first case of each kernel of the file, the granularity's where it has one."""
    from runner.worker.analyze.example_cases import CASES

    mine = [c for c in CASES if c.id.split("-", 1)[0] == prefix]
    if granularity:
        mine = [c for c in mine if granularity in c.id.split("-")] or mine
    first: dict[str, Case] = {}
    for case in mine:
        first.setdefault(case.kernel, case)
    return list(first.values())


@dataclass
class Job:
    """One launch to compile: the name its facts go under, what made it, the JIT
    function, its arguments and the knobs in force at the launch."""

    name: str
    case: str
    fn: JitKernel
    launch: Launch
    knobs: dict[str, object] | None = None
    autotune: str | None = None


def _example_jobs(prefix: str, granularity: str | None, arch: str) -> list[Job]:
    from runner.worker.analyze.example_cases import record
    from runner.worker.analyze.launches import TARGETS

    jobs = []
    for case in _selected(prefix, granularity):
        fn, launch = record(case, arch, TARGETS[arch])
        jobs.append(Job(case.kernel, case.id, fn, launch))
    return jobs


def _primus_turbo_jobs(
    tree: Path, rel: str, op: str, granularity: str | None, arch: str, doc: dict[str, object]
) -> list[Job]:
    """The launches of the op's recipe whose kernel is defined in ``rel``, each distinct
    specialisation once (under the first step that made it)."""
    from runner.worker.analyze.launches import TARGETS, specialise
    from runner.worker.analyze.primus_turbo_cases import SHAPE, kernel_file, record

    launches, doc["stood_in"] = record(tree, op, granularity, arch)
    doc["shape"] = "M={}, N={}, K={}".format(*SHAPE)
    mine = [r for r in launches if kernel_file(r.fn) == (tree / rel).resolve()]
    distinct: dict[str, Recorded] = {}
    for r in mine:
        spec = specialise(r.fn, r.args, r.kwargs, TARGETS[arch])
        distinct.setdefault(repr((r.fn.__name__, spec, sorted(r.knobs.items()))), r)
    jobs = []
    for r in distinct.values():
        name = r.fn.__name__  # with its step where the kernel launches more than one way
        if sum(1 for x in distinct.values() if x.fn is r.fn) > 1:
            name = f"{name} [{r.step}]"
        jobs.append(Job(name, r.step, r.fn, (r.args, r.kwargs), r.knobs, r.autotune))
    return jobs


def _plain(values: Mapping[str, object]) -> dict[str, object]:
    return {k: v for k, v in values.items() if isinstance(v, (int, float, str, bool))}


def compile_file(ns: argparse.Namespace, out: Path) -> dict[str, object]:
    """Compile the kernels of one kernel file as the target's launch recipes launch them
    and write their assembly and ``facts.json`` into ``out``."""
    import triton

    from runner.worker.analyze.launches import TARGETS, compile_launch
    from runner.worker.analyze.primus_turbo_cases import NoRecipe, tree_deps

    target = TARGETS[ns.arch]
    kernels: dict[str, dict[str, object]] = {}
    doc: dict[str, object] = {"arch": ns.arch, "triton": triton.__version__, "kernels": kernels}
    tree = Path.cwd()
    try:
        if ns.target == "primus-turbo":
            jobs = _primus_turbo_jobs(tree, ns.file, ns.op, ns.granularity, ns.arch, doc)
        elif ns.target == "example":
            jobs = _example_jobs(ns.prefix, ns.granularity, ns.arch)
        else:
            raise NoRecipe(f"no launch recipes for target {ns.target}")
    except NoRecipe as exc:
        jobs, doc["note"] = [], str(exc)
    for job in jobs:
        if ns.triton_cache:  # the AMD knobs are not in Triton's cache key: a cache per set
            knobs = json.dumps([ns.arch, sorted((job.knobs or {}).items())], default=str)
            part = hashlib.sha256(knobs.encode()).hexdigest()[:16]
            triton.knobs.cache.dir = str(ns.triton_cache / part)
        compiled, config = compile_launch(job.fn, job.launch, target, job.knobs)
        ext, text, facts = _facts(compiled, target, config)
        isa = re.sub(r"[^A-Za-z0-9_.]+", "-", job.name).strip("-") + f".{ext}"
        write_atomic(out / isa, text)
        entry: dict[str, object] = {
            "case": job.case,
            "config": _plain(config),
            "facts": facts,
            "isa": isa,
        }
        if job.autotune:
            entry["autotune"] = job.autotune
        if job.knobs and target.backend == "hip":
            entry["knobs"] = _plain(job.knobs)
        kernels[job.name] = entry
    doc["deps"] = tree_deps(tree)
    write_json_atomic(out / "facts.json", doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.worker.analyze.compile_main")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--target", default="example")
    ap.add_argument("--file", default="", help="the kernel file, relative to the tree (cwd)")
    ap.add_argument("--op", default="")
    ap.add_argument("--granularity", default=None)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument(
        "--triton-cache", type=Path, default=None, help="Triton's cache (else a fresh one)"
    )
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="triton-cache-"))
    import os

    os.environ["TRITON_CACHE_DIR"] = str(cache)  # without --triton-cache: a compile of its own
    try:
        compile_file(ns, ns.out)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
