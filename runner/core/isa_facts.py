"""Facts about one compiled kernel, read from the text the compiler wrote (docs/analysis.md).

Both sides use this module: the worker-side compile (``runner.analyze``) parses the
AMDGCN or PTX it got into a flat ``dict`` of numbers, and the host compares the
incumbent's with the candidate's (``warnings``).  Standard library only.

AMDGCN: the numbers of the ``.amdgpu_metadata`` block (``.vgpr_count``, ``.agpr_count``,
``.sgpr_count``, the spill counts, ``.group_segment_fixed_size`` for LDS and
``.private_segment_fixed_size`` for scratch), the ``; Occupancy:`` and
``; codeLenInByte =`` lines LLVM writes, and counts of instructions in the text.  The
spill counter can read 0 while the kernel uses scratch, so the scratch instructions are
counted too (docs/analysis.md §2).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

__all__ = ["ARCHS", "FACT_LABELS", "Arch", "parse_amdgcn", "parse_ptx", "warnings"]


@dataclass(frozen=True)
class Arch:
    """What a target offers one workgroup: shared memory / LDS, and the register file."""

    name: str
    backend: str  # "hip" | "cuda"
    warp_size: int
    shared_bytes: int  # per workgroup (NVIDIA: the opt-in maximum per block)
    regs_per_simd: int = 512  # AMD: VGPRs (+AGPRs, unified on CDNA3) per lane of a SIMD
    max_waves_per_simd: int = 8
    simds_per_cu: int = 4


ARCHS = {
    "gfx942": Arch("gfx942", "hip", 64, 64 * 1024),  # MI300X / MI325X: 64 KiB of LDS per CU
    "gfx950": Arch("gfx950", "hip", 64, 160 * 1024),  # MI350X / MI355X: 160 KiB
    "sm90": Arch("sm90", "cuda", 32, 227 * 1024),  # H100 / H200: 228 KiB per SM, 227 per block
}

# What the tables show, in order: key -> label.
FACT_LABELS = {
    "vgpr": "VGPRs",
    "agpr": "AGPRs",
    "sgpr": "SGPRs",
    "regs": "registers / thread",
    "vgpr_spill": "VGPR spills",
    "sgpr_spill": "SGPR spills",
    "spill_bytes": "spill bytes",
    "scratch_bytes": "scratch bytes",
    "scratch_instructions": "scratch instructions",
    "shared_bytes": "LDS / shared bytes",
    "occupancy": "waves per SIMD",
    "code_bytes": "code bytes",
    "instructions": "instructions",
    "mfma": "MFMA",
    "wgmma": "WGMMA / MMA",
    "global_loads": "global loads",
    "lds_loads": "LDS / shared loads",
    "waits": "waits",
}

_META = {
    "vgpr": r"\.vgpr_count",
    "agpr": r"\.agpr_count",
    "sgpr": r"\.sgpr_count",
    "vgpr_spill": r"\.vgpr_spill_count",
    "sgpr_spill": r"\.sgpr_spill_count",
    "shared_bytes": r"\.group_segment_fixed_size",
    "scratch_bytes": r"\.private_segment_fixed_size",
}
_AMD_COUNTS = {
    "mfma": re.compile(r"^v_(mfma|smfmac)"),
    "global_loads": re.compile(r"^(global_load|buffer_load|flat_load)"),
    "lds_loads": re.compile(r"^ds_(read|load)"),
    "waits": re.compile(r"^s_waitcnt"),
    # flat scratch (gfx9.4+), or the MUBUF form of scratch through the private segment
    # buffer s[0:3] with a VGPR offset ("buffer_store_dword v1, v2, s[0:3], 0 offen")
    "scratch_instructions": re.compile(r"^(scratch_|buffer_(load|store)\S*\s.*s\[0:3\].*offen)"),
}
_PTX_COUNTS = {
    "wgmma": re.compile(r"^(wgmma\.mma_async|mma\.sync)"),
    "global_loads": re.compile(r"^(ld\.global|cp\.async\.(ca|cg)|cp\.async\.bulk)"),
    "lds_loads": re.compile(r"^(ld\.shared|ldmatrix)"),
    "waits": re.compile(
        r"^(bar\.sync|barrier|cp\.async\.wait|wgmma\.wait_group|mbarrier\.try_wait)"
    ),
    "scratch_instructions": re.compile(r"^(ld|st)\.local"),
}
_INSTRUCTION = re.compile(r"^\s+([a-z_][a-z0-9_.]*)", re.MULTILINE)


def _first_int(pattern: str, text: str) -> int | None:
    found = re.search(pattern, text, re.MULTILINE)
    return int(found.group(1)) if found else None


def _instructions(text: str, skip_directives: bool = True) -> list[str]:
    """Each instruction line, stripped, in order (directives and labels left out)."""
    out = []
    for line in text.splitlines():
        body = line.split(";", 1)[0].split("//", 1)[0].strip()
        if not body or body.endswith(":") or body.startswith((".", "{", "}", "@@")):
            continue
        out.append(body.lstrip("@!%p0123456789 ") if body.startswith("@") else body)
    return out


def _counted(lines: list[str], counts: dict[str, re.Pattern[str]]) -> dict[str, int]:
    return {key: sum(1 for ln in lines if rx.search(ln)) for key, rx in counts.items()}


def parse_amdgcn(text: str, arch: str, num_warps: int, shared_bytes: int = 0) -> dict[str, Any]:
    """The facts of one kernel's AMDGCN text (``compiled.asm["amdgcn"]``); ``shared_bytes``
    is the LDS the launch allocates (``compiled.metadata.shared``)."""
    facts: dict[str, Any] = {}
    for key, name in _META.items():
        facts[key] = _first_int(rf"^\s*-?\s*{name}:\s+(\d+)", text)
    # Triton's LDS is dynamic: the metadata's segment size reads 0, the launch's is known
    facts["shared_bytes"] = max(facts["shared_bytes"] or 0, shared_bytes)
    kernel_text = text.split(".amdgpu_metadata", 1)[0]
    lines = [ln for ln in _instructions(kernel_text) if not ln.startswith("s_endpgm_")]
    facts.update(_counted(lines, _AMD_COUNTS))
    facts["instructions"] = len(lines)
    facts["code_bytes"] = _first_int(r";\s*codeLenInByte\s*=\s*(\d+)", text)
    # LLVM's "; Occupancy:" counts registers and the compile-time LDS only (0 for
    # Triton's dynamic LDS): the lower of it and the count with the launch's LDS
    reported = _first_int(r";\s*Occupancy:\s*(\d+)", text)
    computed = occupancy(facts, arch, num_warps)
    known = [x for x in (reported, computed) if x is not None]
    facts["occupancy"] = min(known) if known else None
    facts["occupancy_reported"] = reported
    return facts


def occupancy(facts: dict[str, Any], arch: str, num_warps: int) -> int | None:
    """Waves per SIMD that VGPRs (+AGPRs) and LDS allow one kernel on ``arch`` (AMD)."""
    spec = ARCHS.get(arch)
    if spec is None or spec.backend != "hip" or facts.get("vgpr") is None:
        return None
    regs = (facts.get("vgpr") or 0) + (facts.get("agpr") or 0)
    regs = max(8, -(-regs // 8) * 8)  # allocated in granules of 8
    by_regs = min(spec.max_waves_per_simd, spec.regs_per_simd // regs)
    lds = facts.get("shared_bytes") or 0
    if lds > spec.shared_bytes:
        return 0  # it cannot launch
    if lds == 0:
        return by_regs
    groups = spec.shared_bytes // lds
    by_lds = max(1, groups * max(num_warps, 1) // spec.simds_per_cu)
    return min(by_regs, by_lds)


def parse_ptx(text: str, shared_bytes: int, ptxas: str = "") -> dict[str, Any]:
    """The facts of one kernel's PTX, with ``ptxas -v``'s lines when it ran."""
    lines = _instructions(text)
    facts: dict[str, Any] = _counted(lines, _PTX_COUNTS)
    facts["instructions"] = len(lines)
    facts["shared_bytes"] = shared_bytes
    facts["regs"] = _first_int(r"Used (\d+) registers", ptxas)
    stores = _first_int(r"(\d+) bytes spill stores", ptxas)
    loads = _first_int(r"(\d+) bytes spill loads", ptxas)
    facts["spill_bytes"] = None if stores is None else stores + (loads or 0)
    facts["scratch_bytes"] = _first_int(r"(\d+) bytes stack frame", ptxas)
    return facts


def _grew(key: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    a, b = old.get(key), new.get(key)
    return isinstance(b, int) and b > (a if isinstance(a, int) else 0)


def warnings(arch: str, old: dict[str, Any] | None, new: dict[str, Any]) -> list[str]:
    """What matters in the candidate's facts of one kernel against the incumbent's:
    LDS over the target's limit, new spills or scratch, occupancy down."""
    out: list[str] = []
    spec = ARCHS.get(arch)
    shared = new.get("shared_bytes")
    if spec and isinstance(shared, int) and shared > spec.shared_bytes:
        out.append(
            f"over the LDS limit: {shared} B of {spec.shared_bytes} B on {arch} "
            "(it fails to launch there: OutOfResources)"
        )
    old = old or {}
    spilled = [k for k in ("vgpr_spill", "sgpr_spill", "spill_bytes") if _grew(k, old, new)]
    if spilled:
        out.append("new spills: " + ", ".join(f"{k} {old.get(k)} -> {new.get(k)}" for k in spilled))
    scratch = [k for k in ("scratch_bytes", "scratch_instructions") if _grew(k, old, new)]
    if scratch and not spilled:
        out.append(
            "new scratch: " + ", ".join(f"{k} {old.get(k)} -> {new.get(k)}" for k in scratch)
        )
    before, after = old.get("occupancy"), new.get("occupancy")
    if isinstance(before, int) and isinstance(after, int) and after < before:
        out.append(f"occupancy down: {before} -> {after} waves per SIMD")
    return out
