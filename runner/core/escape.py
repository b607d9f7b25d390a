"""Text a user gave (a hypothesis, a reason) shown as data: on a terminal its control
characters are made visible (an OSC sequence such as ``\\e]0;...\\a`` renamed the
terminal), and in markdown it stays one line of text that starts no block (a hypothesis
with a newline and ``## Round 99 — ACCEPTED`` made a real heading in round 4's summary
and so in the HTML report).  ``runner.render.mdhtml`` reads the backslash escapes
``md_text`` writes back as the characters."""

from __future__ import annotations

import re

# C0 controls but tab and newline, DEL, and the C1 controls (ESC, BEL, CSI, OSC, ...).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_CONTROL_ANY = re.compile(r"[\x00-\x1f\x7f-\x9f]")
# What starts a markdown block at the beginning of a line: a heading, a quote, a list
# item, a table row, a fence or a rule.
_BLOCK_START = re.compile(r"^(#|>|[-*+](\s|$)|\||```|-{3,}|\*{3,}|_{3,})")
_NUMBERED = re.compile(r"^(\d+)\.(\s|$)")
# Characters markdown (and ``runner.render.mdhtml``) would read as a link.
_LINK = re.compile(r"([\[\]])")


def _visible(m: re.Match[str]) -> str:
    return f"\\x{ord(m.group()):02x}"


def printable(text: str, *, keep_newlines: bool = True) -> str:
    """``text`` with every terminal control character written as ``\\xNN`` (tab and,
    with ``keep_newlines``, newline kept)."""
    return (_CONTROL if keep_newlines else _CONTROL_ANY).sub(_visible, text)


def md_text(text: str) -> str:
    """``text`` as one line of markdown text: control characters visible, whitespace
    (newlines too) folded, a block marker at its start and link brackets escaped."""
    flat = printable(" ".join(text.split()), keep_newlines=False)
    flat = _LINK.sub(r"\\\1", flat)
    if _NUMBERED.match(flat):
        return _NUMBERED.sub(r"\1\\.\2", flat, count=1)
    if _BLOCK_START.match(flat):
        return "\\" + flat
    return flat


__all__ = ["md_text", "printable"]
