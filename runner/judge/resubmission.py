"""Whether a patch is a judged change again, up to what does not change the code.

Rule 7 of upstream's iteration rules: after a rollback the next hypothesis is new.  A
patch that differs from a rolled-back round's only in its comments, its whitespace or
the names it introduces runs the same code: measured again, it is a second draw of the
same experiment, and a gate that accepts at some false-accept rate per draw accepts a
no-gain change on one of enough draws.  So such a patch is refused like a byte-identical
one (``runner.round.result.check_new``), unless ``validate --resubmit`` asks for the second
draw: then its verdict is judged against what is left of the campaign's false-accept
budget (``runner.judge.false_accept.against_what_is_left``).

A change's *shape* is what survives that: per touched file, the removed and the added
lines as tokens, with comments and blank lines dropped, a statement broken over several
lines joined into one, and each name the change introduces (one the file at the lineage
head does not hold) replaced by its order of first use.  Indentation is kept for Python
files (it is their block structure) as each logical line's leading width; other files
lose it.  Names the file already holds keep their spelling: ``tl.load`` made
``tl.store`` is a new change.  String and number literals are kept as written.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Callable, Iterable

from runner.judge.audit import HUNK_RE, diff_path

# strings, comments, names, numbers, then any single other character; Python's comment
# is '#' ('//' is its floor division), the C-like kernel languages' '//' and '/* */'
# ('#' starts a preprocessor line there: code)
_STRING = r"""(?P<str>[rbuRBUfF]{0,2}("(\\.|[^"\\])*"|'(\\.|[^'\\])*'))"""
_REST = r"|(?P<name>[A-Za-z_][A-Za-z_0-9]*)|(?P<num>\d[\w.]*)|(?P<ws>\s+)|(?P<other>.)"
_PY_TOKEN = re.compile(_STRING + r"|(?P<comment>\#.*)" + _REST)
_C_TOKEN = re.compile(_STRING + r"|(?P<comment>//.*|/\*.*?\*/)" + _REST)
_OPEN, _CLOSE = "([{", ")]}"
_NAME = re.compile(r"[A-Za-z_]\w*")
PYTHON_SUFFIXES = (".py", ".pyi")
_ALWAYS_HELD = frozenset(keyword.kwlist) | frozenset(dir(builtins))

Shape = tuple[tuple[str, tuple[tuple[str, ...], ...], tuple[tuple[str, ...], ...]], ...]


def patch_lines(patch: str) -> dict[str, tuple[list[str], list[str]]]:
    """Each touched file's removed and added lines, in the patch's order, read inside
    each hunk by its line counts (so a removed ``-- x`` is a line, not a header); the
    file's path after the change, a deleted file's before it."""
    files: dict[str, tuple[list[str], list[str]]] = {}
    before: str | None = None
    current: tuple[list[str], list[str]] = ([], [])
    old_left = new_left = 0
    for raw in patch.splitlines():
        if old_left > 0 or new_left > 0:
            tag = raw[:1]
            if tag == "-":
                old_left -= 1
                current[0].append(raw[1:])
            elif tag == "+":
                new_left -= 1
                current[1].append(raw[1:])
            elif tag != "\\":
                old_left, new_left = old_left - 1, new_left - 1
        elif raw.startswith("--- "):
            before = diff_path(raw[4:])
        elif raw.startswith("+++ "):
            path = diff_path(raw[4:]) or before or ""
            current = files.setdefault(path, ([], []))
        elif (m := HUNK_RE.match(raw)) is not None:
            old_left, new_left = int(m.group(1) or 1), int(m.group(3) or 1)
    files.pop("", None)
    return files


def names_in(text: str) -> set[str]:
    """Every name spelled in ``text`` outside its strings and Python comments."""
    return {m.group("name") for m in _PY_TOKEN.finditer(text) if m.group("name")}


def _tokens(line: str, python: bool) -> list[str]:
    lexer = _PY_TOKEN if python else _C_TOKEN
    return [m.group() for m in lexer.finditer(line) if m.lastgroup not in ("ws", "comment")]


def _logical_lines(lines: Iterable[str], python: bool) -> list[list[str]]:
    """The lines' tokens, one entry per statement: comments and blank lines dropped, a
    line continued inside brackets (or after a backslash) joined to the one it
    continues; a Python statement keeps its leading width as its first token."""
    out: list[list[str]] = []
    depth = 0
    continued = False
    for line in lines:
        tokens = _tokens(line, python)
        if not tokens:
            continue
        joined = (depth > 0 or continued) and bool(out)
        depth = max(0, depth + sum(t in _OPEN for t in tokens) - sum(t in _CLOSE for t in tokens))
        continued = tokens[-1] == "\\"
        tokens = [t for t in tokens if t != "\\"]
        if joined:
            out[-1].extend(tokens)
        else:
            width = len(line) - len(line.lstrip())
            out.append([f"<indent {width}>", *tokens] if python else tokens)
    return out


def change_shape(patch: str, known: Callable[[str], set[str]]) -> Shape:
    """The patch's shape (module docstring); ``known(path)`` gives the names the file at
    ``path`` holds at the lineage head (an empty set for a new file)."""
    placeholders: dict[str, str] = {}

    def canonical(lines: list[str], held: set[str], python: bool) -> tuple[tuple[str, ...], ...]:
        result = []
        for logical in _logical_lines(lines, python):
            words = []
            for token in logical:
                if _NAME.fullmatch(token) and token not in held and token not in _ALWAYS_HELD:
                    token = placeholders.setdefault(token, f"<new {len(placeholders)}>")
                words.append(token)
            result.append(tuple(words))
        return tuple(result)

    shape = []
    for path, (removed, added) in patch_lines(patch).items():
        python = path.endswith(PYTHON_SUFFIXES)
        held = known(path)
        shape.append((path, canonical(removed, held, python), canonical(added, held, python)))
    return tuple(shape)


def holds_code(shape: Shape) -> bool:
    """Whether the change removes or adds any code (an A/A round's comment does not)."""
    return any(removed or added for _, removed, added in shape)
