"""Workspace mode's minimal stack for a Python (Triton) kernel of a package that also
has a compiled extension (Primus-Turbo): the kernel and what its import path reaches,
carried unchanged, and small, visible stand-ins only where that path touches what the
stack does not carry (docs/primus-turbo.md, "Workspace mode").

``plan_stack`` follows the top-level imports of the seed modules through the source
tree (``ast``, nothing is imported):

* a module of the tree whose own imports stay within the tree, the standard library
  and the allowed third-party packages (torch, triton, ...) is carried unchanged;
* a module that imports another third-party package unconditionally (Primus-Turbo's
  FlyDSL kernels import the ``flydsl`` compiler) and a module the tree has no source
  for (the compiled ``primus_turbo.pytorch._C``) become stand-ins: a module whose every
  name is a function that raises, saying what it stands for and where to run it;
* a package ``__init__.py`` on the way keeps upstream's statements except the imports
  of modules the stack neither carries nor stands in for (upstream's
  ``primus_turbo/pytorch/__init__.py`` imports the whole package); a trimmed one says so
  in its first lines.

Imports inside ``try`` (upstream guards its optional ones) and inside functions are
not followed: what they reach is optional or runs only on another path.
"""

from __future__ import annotations

import ast
import shutil
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.files import write_atomic

STAND_IN_MARK = "STAND-IN written by turbo-campaign's workspace mode"
ALLOWED_THIRD_PARTY = ("torch", "triton", "numpy", "pytest")

_STAND_IN = '''"""{mark}: not upstream's file.

Stands in for {name}: {why}.  The kernel's import path only names it; calling
anything here raises.  Run this path in the full repository (--mode repo)."""


def __getattr__(name: str):
    if name.startswith("__"):
        raise AttributeError(name)

    def stand_in(*args, **kwargs):
        raise RuntimeError(
            f"{{__name__}}.{{name}} is a stand-in ({why}); run this path in the full "
            "repository (campaign init --mode repo)"
        )

    return stand_in
'''


@dataclass
class Stack:
    """What the stack holds: files carried unchanged (paths relative to the tree) and
    files written (path -> text: stand-ins and trimmed package ``__init__`` files)."""

    carried: list[str] = field(default_factory=list)
    written: dict[str, str] = field(default_factory=dict)

    @property
    def stand_ins(self) -> list[str]:
        return sorted(p for p, text in self.written.items() if STAND_IN_MARK in text)


def _source(root: Path, module: str) -> Path | None:
    base = root / module.replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imports(module: str, path: Path, body: Iterable[ast.stmt]) -> list[tuple[str, bool]]:
    """(imported module, may be a name of it) for each import statement of ``body``."""
    found: list[tuple[str, bool]] = []
    for node in body:
        if isinstance(node, ast.Import):
            found += [(a.name, False) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                keep = len(parts) - node.level + (1 if path.name == "__init__.py" else 0)
                base = ".".join([*parts[:keep], *([base] if base else [])])
            found += [(f"{base}.{a.name}", True) for a in node.names]
    return found


def _is_external(name: str, roots: Sequence[str]) -> bool:
    return name.split(".")[0] not in roots


def _blocked(name: str, allowed: Sequence[str]) -> bool:
    top = name.split(".")[0]
    return top not in sys.stdlib_module_names and top not in allowed and top != "__future__"


def _resolve(root: Path, name: str, maybe_attr: bool) -> str | None:
    """The module an import names: ``name`` itself, or (``from m import x`` where x is
    not a module) ``m``; None for a module the tree has no source for."""
    if _source(root, name):
        return name
    if maybe_attr:
        parent = name.rpartition(".")[0]
        return parent if _source(root, parent) else None
    return None


def _unresolved(name: str, maybe_attr: bool) -> str:
    """The module to stand in for when the tree has no source: for ``from m import x``,
    ``m``; for ``import m``, ``m``."""
    return name.rpartition(".")[0] if maybe_attr else name


def plan_stack(
    root: Path,
    seeds: Sequence[str],
    roots: Sequence[str],
    allowed: Sequence[str] = ALLOWED_THIRD_PARTY,
    optional: Sequence[str] = (),
) -> Stack:
    """The minimal stack for ``seeds`` (module names) in the source tree ``root``;
    ``roots``: the top-level packages the tree holds (``primus_turbo``, ``tests``);
    ``optional`` seeds (a conftest) are carried where the tree has them."""
    carried: dict[str, Path] = {}
    stand_in: dict[str, str] = {}  # module -> why
    todo = [*seeds, *(m for m in optional if _source(root, m))]
    while todo:
        module = todo.pop()
        if module in carried or module in stand_in:
            continue
        path = _source(root, module)
        if path is None:
            stand_in[module] = "a compiled module (no Python source in the checkout)"
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        body = [n for n in tree.body if not isinstance(n, ast.Try)]
        names = _imports(module, path, body)
        blocked = sorted(
            {n.split(".")[0] for n, _ in names if _is_external(n, roots) and _blocked(n, allowed)}
        )
        if blocked and module not in seeds:
            stand_in[module] = f"it imports {', '.join(blocked)}, which this stack does not carry"
            continue
        carried[module] = path
        for name, maybe_attr in names:
            if not _is_external(name, roots):
                todo.append(_resolve(root, name, maybe_attr) or _unresolved(name, maybe_attr))
    return _assemble(root, carried, stand_in, roots)


def _assemble(
    root: Path, carried: dict[str, Path], stand_in: dict[str, str], roots: Sequence[str]
) -> Stack:
    stack = Stack()
    kept = set(carried) | set(stand_in)
    packages = {m.rsplit(".", i)[0] for m in kept for i in range(1, m.count(".") + 1)}
    for path in carried.values():
        if path.name != "__init__.py":
            stack.carried.append(path.relative_to(root).as_posix())
    for module in sorted(packages | {m for m, p in carried.items() if p.name == "__init__.py"}):
        init = _source(root, module)
        if init is None or init.name != "__init__.py":
            continue
        rel = init.relative_to(root).as_posix()
        text = _trimmed_init(root, module, init, kept | packages, roots)
        if text is None:
            stack.carried.append(rel)
        else:
            stack.written[rel] = text
    for module, why in stand_in.items():
        rel = module.replace(".", "/") + ".py"
        if module in packages:
            rel = module.replace(".", "/") + "/__init__.py"
        stack.written[rel] = _STAND_IN.format(mark=STAND_IN_MARK, name=module, why=why)
    stack.carried.sort()
    return stack


def _trimmed_init(
    root: Path, module: str, path: Path, kept: set[str], roots: Sequence[str]
) -> str | None:
    """Upstream's ``__init__.py`` without the imports of modules outside the stack;
    None when nothing had to go."""
    source = path.read_text(encoding="utf-8")
    lines = source.splitlines(keepends=True)
    dropped: list[tuple[int, int, str]] = []
    for node in ast.parse(source).body:  # a try: upstream's guarded import, kept
        found = [(n, a) for n, a in _imports(module, path, [node]) if not _is_external(n, roots)]
        names = [_resolve(root, n, a) or _unresolved(n, a) for n, a in found]
        outside = [n for n in names if n not in kept]
        if outside and len(outside) == len(names):
            end = node.end_lineno or node.lineno
            dropped.append((node.lineno, end, ", ".join(sorted(set(outside)))))
    if not dropped:
        return None
    for start, end, _ in reversed(dropped):
        del lines[start - 1 : end]
    header = (
        f"# {STAND_IN_MARK} (trimmed): upstream's {path.relative_to(root).as_posix()}\n"
        f"# without the imports of modules this stack does not carry: "
        f"{'; '.join(d[2] for d in dropped)}\n"
    )
    return header + "".join(lines)


def write_stack(stack: Stack, source: Path, dest: Path, place: dict[str, str]) -> None:
    """Copy the carried files and write the others under ``dest``; ``place`` maps a
    top-level folder (``primus_turbo``, ``tests``) to where it goes (``src``, ...)."""
    for rel in stack.carried:
        target = dest / place.get(rel.split("/")[0], "") / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source / rel, target)
    for rel, text in stack.written.items():
        write_atomic(dest / place.get(rel.split("/")[0], "") / rel, text)
