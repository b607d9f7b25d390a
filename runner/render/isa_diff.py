"""A readable unified diff of two roles' assembly (``campaign isa``, docs/analysis.md §3).

Readable: comments, directives and the metadata block are left out, and the register
numbers stay (a changed allocation is part of what a round changed).
"""

from __future__ import annotations

import difflib

__all__ = ["isa_body", "isa_diff"]

_SKIP = (".amdgpu_metadata", ".end_amdgpu_metadata")


def isa_body(text: str) -> list[str]:
    """The kernel's labels and instructions, one a line, without comments or directives."""
    body = text.split(_SKIP[0], 1)[0]
    out = []
    for line in body.splitlines():
        code = line.split(";", 1)[0].split("//", 1)[0].rstrip()
        stripped = code.strip()
        if not stripped or stripped.startswith("."):
            continue
        out.append(code.replace("\t", "    "))
    return out


def isa_diff(old: str, new: str, name: str, context: int = 3) -> tuple[str, int, int]:
    """``(diff, lines added, lines removed)`` of ``name``'s incumbent -> candidate ISA."""
    a, b = isa_body(old), isa_body(new)
    lines = list(
        difflib.unified_diff(a, b, f"incumbent/{name}", f"candidate/{name}", n=context, lineterm="")
    )
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    return "\n".join(lines) + ("\n" if lines else ""), added, removed
