"""``python -m runner.analyze.compile_main --prefix P [--granularity G] --arch A --out DIR``:
compile the first case of each kernel of a kernel file (``P``: its name without
``_kernel``, e.g. ``gemm_fp8``) for ``A`` and write, into ``DIR``, each kernel's assembly
(``<kernel>.amdgcn`` or ``<kernel>.ptx``) and ``facts.json``.  The measured tree comes
first on ``PYTHONPATH``; the host (``runner.flow.kernel_facts``) starts one such process
per role and kernel file, with a timeout, and caches what it wrote.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from runner.core.files import write_atomic, write_json_atomic
from runner.core.isa_facts import parse_amdgcn, parse_ptx
from runner.core.processes import run


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
        done = run([str(path), "-v", f"--gpu-name=sm_{arch}a", str(src), "-o", str(src) + ".o"],
                   check=False, timeout=120)  # fmt: skip
    return done.stdout or ""


def _facts(compiled: Any, target: Any, config: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    warps = int(config.get("num_warps", 4))
    if target.backend == "hip":
        text = compiled.asm["amdgcn"]
        shared = int(compiled.metadata.shared)
        return "amdgcn", text, parse_amdgcn(text, str(target.arch), warps, shared)
    text = compiled.asm["ptx"]
    facts = parse_ptx(text, int(compiled.metadata.shared), _ptxas(text, target.arch))
    return "ptx", text, facts


def _selected(prefix: str, granularity: str | None) -> list[Any]:
    """The first case of each kernel of the file, the granularity's where it has one."""
    from runner.analyze.example_cases import CASES

    mine = [c for c in CASES if c.id.split("-", 1)[0] == prefix]
    if granularity:
        mine = [c for c in mine if granularity in c.id.split("-")] or mine
    first: dict[str, Any] = {}
    for case in mine:
        first.setdefault(case.kernel, case)
    return list(first.values())


def compile_file(prefix: str, granularity: str | None, arch: str, out: Path) -> dict[str, Any]:
    import triton

    from runner.analyze.example_cases import record
    from runner.analyze.launches import TARGETS, compile_launch

    target = TARGETS[arch]
    kernels: dict[str, Any] = {}
    for case in _selected(prefix, granularity):
        fn, launch = record(case, arch, target)
        compiled, config = compile_launch(fn, launch, target)
        ext, text, facts = _facts(compiled, target, config)
        write_atomic(out / f"{case.kernel}.{ext}", text)
        plain = {k: v for k, v in config.items() if isinstance(v, (int, float, str, bool))}
        kernels[case.kernel] = {
            "case": case.id,
            "config": plain,
            "facts": facts,
            "isa": f"{case.kernel}.{ext}",
        }
    doc = {"arch": arch, "triton": triton.__version__, "kernels": kernels}
    write_json_atomic(out / "facts.json", doc)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m runner.analyze.compile_main")
    ap.add_argument("--prefix", required=True)
    ap.add_argument("--granularity", default=None)
    ap.add_argument("--arch", required=True)
    ap.add_argument("--out", required=True, type=Path)
    ns = ap.parse_args(argv)
    ns.out.mkdir(parents=True, exist_ok=True)
    cache = Path(tempfile.mkdtemp(prefix="triton-cache-"))
    import os

    os.environ["TRITON_CACHE_DIR"] = str(cache)  # a compile of its own, never a stale one
    try:
        compile_file(ns.prefix, ns.granularity, ns.arch, ns.out)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
