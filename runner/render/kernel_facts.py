"""A round's kernel facts as text: incumbent -> candidate side by side, with the warnings
that matter (docs/analysis.md).  Reads ``RoundResult.kernel_facts`` only."""

from __future__ import annotations

from runner.core.isa_facts import FACT_LABELS, Facts, KernelEntry, KernelFacts

__all__ = ["facts_compact", "facts_lines", "facts_markdown", "facts_title"]

# The facts a one-line view keeps (the table keeps all of them).
COMPACT = (
    "vgpr",
    "agpr",
    "regs",
    "vgpr_spill",
    "spill_bytes",
    "scratch_bytes",
    "scratch_instructions",
    "shared_bytes",
    "occupancy",
    "mfma",
    "wgmma",
    "waits",
)


def _value(v: int | None) -> str:
    return "-" if v is None else str(v)


def facts_title(facts: KernelFacts) -> str:
    return f"{facts.arch}, Triton {facts.triton or '?'}, compiled ahead of time"


Pair = tuple[str, KernelEntry | None, KernelEntry | None]


def _pairs(facts: KernelFacts) -> list[Pair]:
    """(kernel, incumbent entry, candidate entry) for every kernel either role has."""
    inc = facts.roles.get("incumbent") or {}
    cand = facts.roles.get("candidate")
    if cand is None:  # one role (the baseline): the incumbent's only
        return [(k, v, v) for k, v in inc.items()]
    names = list(dict.fromkeys([*inc, *cand]))
    return [(k, inc.get(k), cand.get(k)) for k in names]


def _facts(entry: KernelEntry | None) -> Facts:
    return entry.facts if entry is not None else {}


def _row(key: str, old: Facts, new: Facts) -> str | None:
    a, b = old.get(key), new.get(key)
    if a is None and b is None:
        return None
    change = ""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        change = f"{b - a:+d}"
    return f"| {FACT_LABELS[key]} | {_value(a)} | {_value(b)} | {change} |"


def _config(entry: KernelEntry | None) -> str:
    config = entry.config if entry is not None else {}
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "-"


def facts_markdown(facts: KernelFacts | None) -> str | None:
    """The summary.md section: a table per kernel, then the warnings."""
    if facts is None:
        return None
    lines = [f"{facts_title(facts)}.", ""]
    if facts.note:
        lines += [f"- {facts.note}", ""]
    for name, old, new in _pairs(facts):
        where = new or old
        file, case = (where.file, where.case) if where is not None else ("?", "?")
        lines += [
            f"`{name}` ({file}, case {case})",
            "",
            f"- config: incumbent {_config(old)}; candidate {_config(new)}",
            "",
            "| fact | incumbent | candidate | change |",
            "|---|---|---|---|",
        ]
        lines += [r for r in (_row(k, _facts(old), _facts(new)) for k in FACT_LABELS) if r]
        lines.append("")
    quiet = "- no warning: no LDS overflow, no new spill, occupancy kept"
    lines += [f"- WARNING {w}" for w in facts.warnings] or [quiet]
    return "\n".join(lines)


def facts_compact(facts: KernelFacts) -> list[str]:
    """One line per kernel, ``fact a -> b`` for the facts that matter most."""
    out = []
    for name, old, new in _pairs(facts):
        old_f, new_f = _facts(old), _facts(new)
        parts = []
        for key in COMPACT:
            a, b = old_f.get(key), new_f.get(key)
            if a is None and b is None:
                continue
            parts.append(f"{FACT_LABELS[key]} {_value(a)}" + ("" if a == b else f" -> {_value(b)}"))
        out.append(f"{name}: " + ", ".join(parts))
    return out


def facts_lines(facts: KernelFacts | None) -> list[str]:
    """The facts for a terminal (``campaign show``, ``status``): title, kernels, warnings."""
    if facts is None:
        return []
    lines = [f"kernel facts ({facts_title(facts)}; incumbent -> candidate):"]
    if facts.note:
        lines.append(f"  {facts.note}")
    lines += [f"  {line}" for line in facts_compact(facts)]
    lines += [f"  WARNING {w}" for w in facts.warnings]
    return lines
