"""The harness-reach rule of the static audit: code under test must not see or touch
the harness that measures it (docs/protocol.md §8.2).

Flags, in the changed lines of a candidate (bucket ``HARNESS``, a reject):

* stack and frame inspection: ``sys._getframe``, ``inspect.stack``/``currentframe``/
  ``getouterframes``/``trace``, ``traceback.extract_stack``/``walk_stack``/...,
  and the frame attributes (``f_back``, ``f_globals``, ``f_locals``, ``tb_frame``...);
* looking the harness up: any use of ``sys.modules``, an import of ``runner`` (the
  harness package) or ``ctypes``, ``importlib.import_module``/``__import__`` of a name
  starting with ``runner``;
* reach-ins: ``gc.get_objects``/``get_referrers``/``get_referents``;
* assignments to attributes of modules (or objects imported from packages) that the
  patched package does not own: ``time.process_time = ...``,
  ``timing.process_time = ...`` after ``from runner.worker.bench import timing``,
  ``setattr(time, ...)``, ``vars(mod)[...] = ...``, ``mod.__dict__[...] = ...``.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

BUCKET = "HARNESS"
FRAME_CALLS = frozenset(
    {
        "_getframe",
        "_current_frames",
        "currentframe",
        "getouterframes",
        "getinnerframes",
        "stack",
        "trace",
        "extract_stack",
        "walk_stack",
        "format_stack",
        "print_stack",
        "walk_tb",
        "extract_tb",
    }
)
FRAME_MODULES = frozenset({"sys", "inspect", "traceback"})
FRAME_ATTRS = frozenset(
    {
        "f_back",
        "f_globals",
        "f_locals",
        "f_code",
        "f_builtins",
        "tb_frame",
        "tb_next",
        "gi_frame",
        "cr_frame",
        "ag_frame",
    }
)
GC_CALLS = frozenset({"get_objects", "get_referrers", "get_referents"})
HARNESS = "runner"
FOREIGN_IMPORTS = frozenset({"ctypes", HARNESS})


def own_package(path: str) -> str:
    """The top-level package a changed file belongs to (``turbo_kernels/x/y.py`` ->
    ``turbo_kernels``)."""
    first = path.replace("\\", "/").split("/")[0]
    return first.removesuffix(".py")


def foreign_names(tree: ast.AST, own: str) -> dict[str, str]:
    """Local names bound to modules or objects imported from packages other than
    ``own`` (relative imports are owned): ``{local name: dotted origin}``."""
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] != own:
                    local = alias.asname or alias.name.split(".")[0]
                    names[local] = alias.name if alias.asname else alias.name.split(".")[0]
        elif (
            isinstance(node, ast.ImportFrom)
            and node.level == 0
            and node.module
            and node.module.split(".")[0] != own
        ):
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _base(expr: ast.expr) -> ast.expr:
    while isinstance(expr, (ast.Attribute, ast.Subscript)):
        expr = expr.value
    return expr


def findings(tree: ast.AST, path: str) -> Iterator[tuple[ast.AST, str]]:
    """(node, message) for every harness-reach site in ``tree``."""
    own = own_package(path)
    foreign = foreign_names(tree, own)
    for node in ast.walk(tree):
        msg = _message(node, foreign, own)
        if msg:
            yield node, msg


def _origin(expr: ast.expr, foreign: dict[str, str]) -> str | None:
    base = _base(expr)
    return foreign.get(base.id) if isinstance(base, ast.Name) else None


def _message(node: ast.AST, foreign: dict[str, str], own: str) -> str | None:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        if isinstance(node, ast.ImportFrom) and node.level:
            return None
        bad = [m for m in mods if m.split(".")[0] in FOREIGN_IMPORTS and own != HARNESS]
        if bad:
            return f"imports {bad[0]}: the harness or raw memory is none of the kernel's affair"
        return None
    if isinstance(node, ast.Attribute):
        if node.attr in FRAME_ATTRS:
            return f"reads the frame attribute `{node.attr}`: stack inspection"
        if node.attr == "modules" and _origin(node.value, foreign) == "sys":
            return "looks modules up in `sys.modules`: a way to reach the harness"
        return None
    if isinstance(node, ast.Call):
        return _call_message(node, foreign)
    if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for tgt in targets:
            origin = _patched(tgt, foreign)
            if origin:
                return (
                    f"assigns `{ast.unparse(tgt)}`, an attribute of `{origin}`, which this "
                    "package does not own: patching another module (a clock, the harness)"
                )
    return None


def _patched(tgt: ast.expr, foreign: dict[str, str]) -> str | None:
    if isinstance(tgt, ast.Attribute):
        return _origin(tgt.value, foreign)
    if isinstance(tgt, ast.Subscript):
        inner = tgt.value
        if isinstance(inner, ast.Attribute) and inner.attr == "__dict__":
            return _origin(inner.value, foreign)
        if isinstance(inner, ast.Call) and ast.unparse(inner.func) == "vars" and inner.args:
            return _origin(inner.args[0], foreign)
    return None


def _call_message(node: ast.Call, foreign: dict[str, str]) -> str | None:
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    origin = _origin(func, foreign) or ""
    module = origin.split(".")[0]
    if name in FRAME_CALLS and (module in FRAME_MODULES or name in ("_getframe", "currentframe")):
        return f"calls `{ast.unparse(func)}`: stack inspection (it can tell a timed call apart)"
    if name in GC_CALLS and module == "gc":
        return f"calls `{ast.unparse(func)}`: reaches into objects it was not given"
    if name in ("setattr", "delattr") and node.args:
        target = _origin(node.args[0], foreign)
        if target:
            return f"`{name}` on `{target}`, which this package does not own: patching it"
    if name in ("import_module", "__import__") and node.args:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and str(arg.value).split(".")[0] in FOREIGN_IMPORTS:
            return (
                f"imports {arg.value!r} at run time: the harness is none of the kernel's business"
            )
    return None
