"""When a quick round's acceptance must be confirmed at the full level (docs/upstream-loop.md §2).

Upstream's loop (Primus-Turbo ``agent/skills/kernel-optimize/workflow/optimize-loop.md``,
"Validation Levels" and VALIDATE step 5, checked at a6a16cdc): quick validation is for
small steps within a direction; "when a direction completes, when quick results are
borderline (improvement < 5%), or when changes are high-risk (control flow, data
layout, etc.), upgrade to full validation for confirmation".

Two of the three are mechanical and decided here, from the quick gate and from both
sources of the files the change touched:

* borderline: the quick gain is under ``BORDERLINE_PCT``;
* high-risk: the change alters control flow (the count of branches, loops, loop exits,
  ``try`` blocks and conditional expressions of a changed Python file differs between
  the incumbent and the candidate) or data layout (the count of transposes, permutes,
  views, reshapes, ``contiguous``, strides and Triton's ``order=``/``tl.trans``/block
  pointers differs).
  Counting syntax, not lines, keeps a comment or a renamed variable out of it.

"A direction completes" is the user's judgement: ``--level full`` runs that round at the
full level.  Pure: no I/O, no torch."""

from __future__ import annotations

import ast
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

BORDERLINE_PCT = 5.0  # upstream: "borderline (improvement < 5%)"

# a new helper's ``return`` or an error path's ``raise`` is no branch
CONTROL_NODES = (
    ast.If,
    ast.IfExp,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Break,
    ast.Continue,
    ast.Try,
    ast.Match,
)
LAYOUT_CALLS = frozenset(
    {
        "t",
        "transpose",
        "permute",
        "contiguous",
        "view",
        "reshape",
        "as_strided",
        "stride",
        "trans",
        "make_block_ptr",
        "movedim",
        "swapaxes",
        "flatten",
        "unflatten",
        "expand",
    }
)
LAYOUT_KEYWORDS = frozenset({"order", "strides", "stride", "memory_format"})


@dataclass(frozen=True)
class Confirmation:
    """Why a quick round's acceptance is to be confirmed at the full level (``why``,
    each a sentence) and whether the full level would measure anything the quick one
    did not (``adds_shapes``: the target shapes outside the representative set)."""

    why: tuple[str, ...]
    adds_shapes: tuple[str, ...]

    @property
    def due(self) -> bool:
        return bool(self.why) and bool(self.adds_shapes)

    def summary(self) -> str:
        return "; ".join(self.why)


def _counts(source: str) -> tuple[Counter[str], Counter[str]] | None:
    """(control-flow node counts, layout operation counts) of one Python source; None
    when it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    control: Counter[str] = Counter()
    layout: Counter[str] = Counter()
    for node in ast.walk(tree):
        if isinstance(node, CONTROL_NODES):
            control[type(node).__name__] += 1
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if name in LAYOUT_CALLS:
                layout[name] += 1
            for kw in node.keywords:
                if kw.arg in LAYOUT_KEYWORDS:
                    layout[f"{kw.arg}="] += 1
        elif isinstance(node, ast.Attribute) and node.attr in ("T", "mT"):
            layout[f".{node.attr}"] += 1
    return control, layout


def _changed(old: Counter[str], new: Counter[str]) -> list[str]:
    return sorted(k for k in set(old) | set(new) if old[k] != new[k])


def change_risk(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """The high-risk kinds of a change, one sentence each: control flow or data layout
    altered in a Python file the change touched (``old``/``new``: path -> source of the
    incumbent and the candidate; a file only one side has counts as empty on the other).
    A file that does not parse is named as a risk of its own."""
    out: list[str] = []
    for path in sorted(set(old) | set(new)):
        if not path.endswith(".py"):
            continue
        before = _counts(old.get(path, ""))
        after = _counts(new.get(path, ""))
        if before is None or after is None:
            out.append(f"{path} does not parse on one side: its control flow is unknown")
            continue
        control = _changed(before[0], after[0])
        layout = _changed(before[1], after[1])
        if control:
            out.append(f"control flow changes in {path} ({', '.join(control)})")
        if layout:
            out.append(f"data layout changes in {path} ({', '.join(layout)})")
    return out


def confirmation_due(
    level: str,
    gain_pct: float,
    risks: Sequence[str],
    quick_labels: Sequence[str],
    full_labels: Sequence[str],
) -> Confirmation:
    """Whether a quick round the gate ACCEPTED at ``gain_pct`` is to be confirmed at the
    full level: its gain is borderline or ``risks`` (``change_risk``) name a high-risk
    change, and the full level measures target shapes the quick one did not (where the
    representative set is every target, the quick verdict is the full one).  A full
    round is never confirmed again."""
    if level != "quick":
        return Confirmation((), ())
    why: list[str] = []
    if gain_pct < BORDERLINE_PCT:
        why.append(f"borderline: the quick gain {gain_pct:+.2f}% is under {BORDERLINE_PCT:g}%")
    why += [f"high-risk: {r}" for r in risks]
    quick = set(quick_labels)
    adds = tuple(label for label in full_labels if label not in quick)
    return Confirmation(tuple(why), adds)
