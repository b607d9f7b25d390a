"""Facts about one compiled kernel, read from the text the compiler wrote (docs/analysis.md).

Both sides use this module: the worker-side compile (``runner.worker.analyze``) parses the
AMDGCN or PTX it got into a flat ``dict`` of numbers (``Facts``), and the host compares
the incumbent's with the candidate's (``warnings``) and records a round's kernels in a
``KernelFacts`` (each role's ``KernelEntry`` per kernel).  Standard library only.

AMDGCN: the numbers of the ``.amdgpu_metadata`` block (``.vgpr_count``, ``.agpr_count``,
``.sgpr_count``, the spill counts, ``.group_segment_fixed_size`` for LDS and
``.private_segment_fixed_size`` for scratch), the ``; Occupancy:`` and
``; codeLenInByte =`` lines LLVM writes, and counts of instructions in the text.  The
spill counter can read 0 while the kernel uses scratch, so the scratch instructions are
counted too (docs/analysis.md §2).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

__all__ = [
    "ARCHS",
    "FACT_LABELS",
    "Arch",
    "Facts",
    "KernelEntry",
    "KernelFacts",
    "parse_amdgcn",
    "parse_ptx",
    "warnings",
]

# One kernel's facts: ``FACT_LABELS``' keys (and a few more) -> a count, or None where
# the compiler's text did not say.
Facts = dict[str, int | None]


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


# LDS per CU as AMD's GPU specifications table gives it (ROCm 7.13.0-preview,
# rocm.docs.amd.com/en/7.13.0-preview/reference/gpu-specs.html: MI300X/MI325X gfx942
# 64 KiB, MI350X/MI355X gfx950 160 KiB).
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


def parse_amdgcn(text: str, arch: str, num_warps: int, shared_bytes: int = 0) -> Facts:
    """The facts of one kernel's AMDGCN text (``compiled.asm["amdgcn"]``); ``shared_bytes``
    is the LDS the launch allocates (``compiled.metadata.shared``)."""
    facts: Facts = {}
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


def occupancy(facts: Facts, arch: str, num_warps: int) -> int | None:
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


def parse_ptx(text: str, shared_bytes: int, ptxas: str = "") -> Facts:
    """The facts of one kernel's PTX, with ``ptxas -v``'s lines when it ran."""
    lines = _instructions(text)
    facts: Facts = {**_counted(lines, _PTX_COUNTS)}
    facts["instructions"] = len(lines)
    facts["shared_bytes"] = shared_bytes
    facts["regs"] = _first_int(r"Used (\d+) registers", ptxas)
    stores = _first_int(r"(\d+) bytes spill stores", ptxas)
    loads = _first_int(r"(\d+) bytes spill loads", ptxas)
    facts["spill_bytes"] = None if stores is None else stores + (loads or 0)
    facts["scratch_bytes"] = _first_int(r"(\d+) bytes stack frame", ptxas)
    return facts


def _grew(key: str, old: Facts, new: Facts) -> bool:
    a, b = old.get(key), new.get(key)
    return isinstance(b, int) and b > (a if isinstance(a, int) else 0)


def warnings(arch: str, old: Facts | None, new: Facts) -> list[str]:
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


def _facts_of(doc: object) -> Facts:
    """A recorded kernel's facts, only the counts (a record is read as it was written)."""
    if not isinstance(doc, Mapping):
        return {}
    return {str(k): v if isinstance(v, int) else None for k, v in doc.items()}


@dataclass(frozen=True)
class KernelEntry:
    """One kernel of one role: the kernel file it is in, the launch case and config
    that compiled it, its facts, and its assembly (in the compile cache until the round
    closes, then ``profiles/round-N/<role>/``, relative to the campaign)."""

    file: str
    case: str
    config: dict[str, object]
    facts: Facts
    isa: str
    autotune: str | None = None  # the autotuned function whose first config it is
    knobs: dict[str, object] | None = None  # the AMD compiler knobs the launch set

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"case": self.case, "config": dict(self.config)}
        out.update(facts=dict(self.facts), isa=self.isa, file=self.file)
        if self.autotune:
            out["autotune"] = self.autotune
        if self.knobs:
            out["knobs"] = dict(self.knobs)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object], file: str | None = None) -> KernelEntry:
        """An entry as a compile's ``facts.json`` or a round's record holds it
        (``file``: the kernel file, where the compile's record does not name it)."""
        config, knobs, autotune = d.get("config"), d.get("knobs"), d.get("autotune")
        return cls(
            file=str(d.get("file") or file or "?"),
            case=str(d.get("case") or "?"),
            config=dict(config) if isinstance(config, Mapping) else {},
            facts=_facts_of(d.get("facts")),
            isa=str(d.get("isa") or ""),
            autotune=str(autotune) if autotune else None,
            knobs=dict(knobs) if isinstance(knobs, Mapping) else None,
        )


Kernels = dict[str, KernelEntry]  # kernel name -> its entry, of one role


@dataclass(frozen=True)
class KernelFacts:
    """A round's kernel facts (docs/analysis.md): the arch and Triton they were compiled
    for, each role's kernels (``incumbent``, ``candidate``; a tournament's measurement
    ``candidate-K``), the candidate's warnings against the incumbent, and ``note``: why
    there are none, or what stood in for a module."""

    arch: str
    triton: str | None
    roles: dict[str, Kernels] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    note: str | None = None

    @classmethod
    def none(cls, arch: str, triton: str | None, why: str) -> KernelFacts:
        """No facts, and why (``note`` starts "no kernel facts: ")."""
        return cls(arch, triton, note=f"no kernel facts: {why}")

    def judged(self) -> KernelFacts:
        """These facts with their warnings: each candidate role's kernels against the
        incumbent's (one role: its own)."""
        inc = self.roles.get("incumbent", {})
        said: list[str] = []
        for role in [r for r in self.roles if r != "incumbent"] or ["incumbent"]:
            for name, entry in self.roles.get(role, {}).items():
                old = inc[name].facts if role != "incumbent" and name in inc else None
                said += [f"{name}: {w}" for w in warnings(self.arch, old, entry.facts)]
        return replace(self, warnings=tuple(said))

    def over_lds(self, role: str = "candidate") -> list[str]:
        """Each kernel of ``role`` whose LDS is over the arch's limit, named with its
        file and bytes.  On AMD such a kernel may launch and read garbage (a kernel
        256 B over MI300X's 64 KiB did), so a round refuses it before measuring."""
        spec = ARCHS.get(self.arch)
        if spec is None:
            return []
        out = []
        for name, entry in sorted(self.roles.get(role, {}).items()):
            shared = entry.facts.get("shared_bytes")
            if isinstance(shared, int) and shared > spec.shared_bytes:
                out.append(
                    f"{name} ({entry.file}): {shared} B of LDS, over {self.arch}'s "
                    f"{spec.shared_bytes} B by {shared - spec.shared_bytes} B"
                )
        return out

    def for_role(self, role: str) -> KernelFacts:
        """The record of one candidate ``role`` of a measurement of several (a
        tournament's entry): the incumbent and that role as "candidate", judged."""
        if role not in self.roles:
            return replace(self, roles={}, warnings=())
        pair = {"incumbent": self.roles.get("incumbent", {}), "candidate": self.roles[role]}
        return replace(self, roles=pair).judged()

    def to_dict(self) -> dict[str, object]:
        roles = {r: {k: e.to_dict() for k, e in ks.items()} for r, ks in self.roles.items()}
        out: dict[str, object] = {
            "arch": self.arch,
            "triton": self.triton,
            "roles": roles,
            "warnings": list(self.warnings),
        }
        if self.note is not None:
            out["note"] = self.note
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> KernelFacts:
        """The record as ``to_dict`` wrote it (a ``result.json``'s ``kernel_facts``)."""
        roles = d.get("roles")
        said = d.get("warnings")
        return cls(
            arch=str(d.get("arch") or "?"),
            triton=str(d["triton"]) if d.get("triton") else None,
            roles={
                str(role): {
                    str(k): KernelEntry.from_dict(e)
                    for k, e in kernels.items()
                    if isinstance(e, Mapping)
                }
                for role, kernels in (roles.items() if isinstance(roles, Mapping) else ())
                if isinstance(kernels, Mapping)
            },
            warnings=tuple(str(w) for w in said) if isinstance(said, list) else (),
            note=str(d["note"]) if d.get("note") else None,
        )
