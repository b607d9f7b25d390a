"""The per-file half of the static audit: the findings one changed Python source holds (the
rules are listed in runner.judge.audit)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass

from runner.judge import reach
from runner.judge.audit_ast import (
    GROUP_LENS_RE,
    KEY_METHODS,
    MPG_AMBIGUOUS,
    MPG_RE,
    TOKENS_RE,
    WRITE_METHODS,
    Resolver,
    Scope,
    first_dim,
    fixed_size,
    group_count,
    identity_args,
    int_constant,
    is_container,
    key_verdict,
    last_name,
    lens_values,
    m_like,
    make_scope,
    nonempty_test,
    own_nodes,
    tensor_data,
    tensor_param,
    uniform_div,
    used_as_tensor,
)

REJECT, WARN = "reject", "warn"


CACHE_BUCKETS = frozenset({"W1", "W2", "W3"})


GG = "GG-UNIFORM"


_WARN_BUCKETS = frozenset({"W1", "ID-KEY"})


@dataclass(frozen=True)
class Finding:
    """One audit hit.  ``lines``: every source line the verdict depends on (the site and
    the resolved key assignments); ``signature``: line-independent, to diff against the
    audit of the old source."""

    bucket: str
    path: str
    line: int
    message: str
    severity: str
    rule: str = ""
    lines: tuple[int, ...] = ()
    signature: str = ""

    def to_dict(self) -> dict[str, object]:
        keys = ("bucket", "path", "line", "message", "severity", "rule")
        return {k: getattr(self, k) for k in keys}


class _ModuleAudit:
    def __init__(self, path: str, tree: ast.Module) -> None:
        self.path = path
        self.tree = tree
        self.scopes: dict[ast.AST, Scope] = {}
        self._build(tree, None)
        funcs = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
        self.resolver = Resolver(funcs, self.scopes)
        self.persistent = {p for node in self.scopes for p in self._containers(node)}
        self.findings: dict[tuple[int, str], Finding] = {}

    def _build(self, node: ast.AST, parent: Scope | None) -> None:
        self.scopes[node] = scope = make_scope(node, parent, self.path)
        for sub in own_nodes(node):
            if isinstance(sub, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self._build(sub, scope)

    @staticmethod
    def _containers(node: ast.AST) -> Iterator[str]:
        """Module-, class- and instance-level containers assigned in ``node``'s body."""
        for sub in own_nodes(node):
            value = getattr(sub, "value", None)
            if not isinstance(sub, (ast.Assign, ast.AnnAssign)) or value is None:
                continue
            if not is_container(value):
                continue
            for tgt in sub.targets if isinstance(sub, ast.Assign) else [sub.target]:
                if isinstance(tgt, ast.Name) and isinstance(node, ast.Module):
                    yield tgt.id
                elif isinstance(tgt, ast.Name) and isinstance(node, ast.ClassDef):
                    yield from (f"self.{tgt.id}", f"cls.{tgt.id}", f"{node.name}.{tgt.id}")
                elif isinstance(tgt, ast.Attribute) and ast.unparse(tgt.value) in ("self", "cls"):
                    yield ast.unparse(tgt)

    def run(self) -> list[Finding]:
        for node, scope in self.scopes.items():
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                self._check_function(node, scope)
            for sub in own_nodes(node):
                self._check_node(sub, scope)
        module_scope = self.scopes[self.tree]
        for site, msg in reach.findings(self.tree, self.path):
            self._add(reach.BUCKET, site, msg, "harness-reach", self._scope_of(site, module_scope))
        return sorted(self.findings.values(), key=lambda f: (f.line, f.bucket))

    def _scope_of(self, site: ast.AST, default: Scope) -> Scope:
        """The innermost function or class scope holding ``site``."""
        line = getattr(site, "lineno", 0)
        best = default
        for node, scope in self.scopes.items():
            start, end = getattr(node, "lineno", 0), getattr(node, "end_lineno", 0) or 0
            if start <= line <= end and start >= getattr(best.node, "lineno", 0):
                best = scope
        return best

    def _add(
        self,
        bucket: str,
        site: ast.AST,
        msg: str,
        rule: str,
        scope: Scope,
        extra: set[int] | None = None,
    ) -> None:
        line = getattr(site, "lineno", 0)
        lines = set(range(line, (getattr(site, "end_lineno", None) or line) + 1)) | (extra or set())
        sig = f"{rule}|{bucket}|{scope.qualname}|{ast.unparse(site)}"
        sev = WARN if bucket in _WARN_BUCKETS else REJECT
        found = Finding(
            bucket,
            self.path,
            line,
            f"{scope.qualname}: {msg}",
            sev,
            rule,
            tuple(sorted(lines)),
            sig,
        )
        self.findings.setdefault((line, bucket), found)

    def _check_node(self, node: ast.AST, scope: Scope) -> None:
        if isinstance(node, ast.Subscript):
            self._check_key(node, node.slice, node.value, scope)
        elif isinstance(node, ast.Call):
            self._check_call(node, scope)
        elif isinstance(node, ast.Compare):
            self._check_compare(node, scope)
        elif isinstance(node, ast.Dict):
            for key in node.keys:
                if key is not None:
                    self._check_key(node, key, None, scope)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            self._check_assign(node, scope)
        elif isinstance(node, ast.Assert) or (
            isinstance(node, ast.If) and any(isinstance(s, ast.Raise) for s in node.body)
        ):
            self._check_assumption(node, node.test, scope)

    # --- identity keys (W1/W2/W3)
    def _check_key(
        self,
        site: ast.AST,
        key: ast.expr,
        container: ast.expr | None,
        scope: Scope,
        rule: str = "id-key",
    ) -> None:
        parts, lines = self.resolver.expand(key, scope)
        targets = [t for p in parts for t in identity_args(p)]
        cname = ast.unparse(container) if container is not None else ""
        if (
            cname in self.persistent
            or cname in scope.globals_
            or re.search("cache|memo", cname, re.I)
        ):
            elts = key.elts if isinstance(key, ast.Tuple) else [key]
            targets += [
                (e, True) for e in elts if isinstance(e, ast.Name) and tensor_param(e.id, scope)
            ]
        verdict = key_verdict(targets, parts, scope)
        if verdict is not None:
            self._add(verdict[0], site, verdict[1], rule, scope, lines)

    def _check_compare(self, node: ast.Compare, scope: Scope) -> None:
        if any(isinstance(op, (ast.In, ast.NotIn)) for op in node.ops):
            self._check_key(node, node.left, node.comparators[0], scope)
            return
        sides = [node.left, *node.comparators]
        with_id = [bool(identity_args(s)) for s in sides]
        if any(with_id) and not all(with_id):  # id(x) == id(y) compares, stores nothing
            self._check_key(node, ast.Tuple(elts=sides, ctx=ast.Load()), None, scope)
        elif any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops):
            bare = [
                (s, True) for s in sides if isinstance(s, ast.Name) and tensor_param(s.id, scope)
            ]
            if bare and any(isinstance(s, (ast.Attribute, ast.Subscript, ast.Call)) for s in sides):
                verdict = key_verdict(bare, [], scope)
                if verdict is not None:
                    msg = "identity test against stored state: " + verdict[1]
                    self._add(verdict[0], node, msg, "id-key", scope)

    def _check_call(self, node: ast.Call, scope: Scope) -> None:
        func = node.func
        for kw in node.keywords:
            ambiguous = kw.arg and MPG_AMBIGUOUS.match(kw.arg)
            fixed = (
                int_constant(kw.value) or uniform_div(kw.value) or bool(kw.arg and kw.arg.isupper())
            )
            if kw.arg and MPG_RE.match(kw.arg) and (fixed or not ambiguous):
                msg = f"passes `{kw.arg}=`: a fixed tokens-per-group layout"
                self._add(GG, node, msg, "gg-constexpr", scope)
        if isinstance(func, ast.Attribute) and node.args:
            if func.attr in KEY_METHODS:
                self._check_key(node, node.args[0], func.value, scope)
            if func.attr in WRITE_METHODS and scope.fwd_like:
                self._check_write(node, func.value, node.args[0], node.args[-1], scope)
        fname = ast.unparse(func).rsplit(".", 1)[-1]
        if fname in ("device_assert", "static_assert", "_assert") and node.args:
            self._check_assumption(node, node.args[0], scope)
        if scope.grouped:
            self._check_partition(node, scope)

    def _check_assign(self, node: ast.Assign | ast.AnnAssign | ast.AugAssign, scope: Scope) -> None:
        value = node.value
        for tgt in node.targets if isinstance(node, ast.Assign) else [node.target]:
            if isinstance(tgt, ast.Name) and value is not None:
                self._check_layout_name(node, tgt.id, value, scope)
            if value is None or not scope.fwd_like:
                continue
            if isinstance(tgt, ast.Subscript):
                self._check_write(node, tgt.value, tgt.slice, value, scope)
            elif isinstance(tgt, ast.Name) and tgt.id in scope.globals_:
                self._check_write(node, tgt, value, value, scope)
            elif isinstance(tgt, ast.Attribute) and ast.unparse(tgt.value) in ("self", "cls"):
                self._check_key(node, value, None, scope, "memo-container")

    # --- memoisation in forward/backward
    def _check_write(
        self, site: ast.AST, container: ast.expr, key: ast.expr, value: ast.expr, scope: Scope
    ) -> None:
        name = ast.unparse(container)
        if name not in self.persistent and name not in scope.globals_:
            return
        before = len(self.findings)
        self._check_key(site, key, container, scope, "memo-container")
        if len(self.findings) > before:
            return
        lines = self.resolver.expand(value, scope)[1]
        data = sorted(tensor_data(value, scope))
        if data:
            msg = (
                f"persistent `{name}` written in forward/backward stores data of {data} "
                f"keyed on `{ast.unparse(key)}`: cross-call memoisation"
            )
            self._add("W3", site, msg, "memo-container", scope, lines)

    def _check_function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef, scope: Scope) -> None:
        for name, arg in scope.params.items():
            constexpr = "constexpr" in scope.ann(name) or scope.ann(name) == "int"
            if MPG_RE.match(name) and (constexpr or not MPG_AMBIGUOUS.match(name)):
                kind = "compile-time constant" if constexpr else "parameter"
                self._add(
                    GG, arg, f"{kind} `{name}` fixes the tokens per group", "gg-constexpr", scope
                )
        for dec in fn.decorator_list:
            base = ast.unparse(dec.func if isinstance(dec, ast.Call) else dec)
            if base.rsplit(".", 1)[-1] not in ("lru_cache", "cache", "cached"):
                continue
            params = [p for p in scope.params if p not in ("self", "cls")]
            sure = [
                p
                for p in params
                if "Tensor" in scope.ann(p)
                or (not scope.ann(p) and not p.isupper() and used_as_tensor(fn, p))
            ]
            hinted = [p for p in params if tensor_param(p, scope) and scope.fwd_like]
            if sure or hinted:
                msg = (
                    f"`@{base}` on `{fn.name}` memoises on tensor parameter(s) "
                    f"{sorted(set(sure + hinted))}: hash(Tensor) is id(Tensor)"
                )
                extra = set(range(dec.lineno, fn.body[0].lineno))
                self._add("W3", dec, msg, "lru-cache", scope, extra)

    # --- grouped GEMM
    def _check_layout_name(self, node: ast.AST, name: str, value: ast.expr, scope: Scope) -> None:
        fixed = int_constant(value) or uniform_div(value)
        if MPG_RE.match(name) and (fixed or not MPG_AMBIGUOUS.match(name)):
            self._add(GG, node, f"`{name}` fixes the tokens per group", "gg-constant", scope)
        elif GROUP_LENS_RE.match(name) and uniform_div(value):
            msg = f"`{name}` synthesised as a uniform split `{ast.unparse(value)}`"
            self._add(GG, node, msg, "gg-constant", scope)

    def _check_assumption(self, site: ast.AST, test: ast.expr, scope: Scope) -> None:
        for node in ast.walk(test):
            if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod)):
                continue
            if lens_values(node.left) or (scope.grouped and m_like(node.left)):
                msg = f"divisibility assumption `{ast.unparse(node)}` on tokens per group"
                self._add(GG, site, msg, "gg-divisible", scope)
                return
        raising = isinstance(site, ast.If)  # `if <test>: raise` asserts `not <test>`
        if nonempty_test(test, raising) and lens_values(test):
            msg = f"assumes every group is non-empty: `{ast.unparse(test)}`"
            self._add(GG, site, msg, "gg-nonempty", scope)

    def _check_partition(self, node: ast.Call, scope: Scope) -> None:
        func = node.func
        if not isinstance(func, ast.Attribute):
            return
        is_torch = ast.unparse(func.value) == "torch"
        recv = node.args[0] if is_torch and node.args else func.value
        args = node.args[1:] if is_torch else node.args
        if not args or not TOKENS_RE.match(last_name(recv) or ""):
            return
        what = ast.unparse(node)
        size = args[0]
        uniform_local = isinstance(size, ast.Name) and any(  # `rows = M // G`, then split
            uniform_div(v) for v, _ in scope.assigns.get(size.id, [])
        )
        if func.attr in ("split", "tensor_split") and (fixed_size(size) or uniform_local):
            msg = f"`{what}` splits tokens into fixed-size groups"
        elif func.attr == "chunk":
            msg = f"`{what}` splits tokens into equal groups"
        elif func.attr in ("view", "reshape", "unflatten") and group_count(
            first_dim(args, func.attr)
        ):
            msg = f"`{what}` reshapes tokens to (groups, tokens, ...)"
        else:
            return
        self._add(GG, node, msg + ": assumes a uniform token layout", "gg-static-split", scope)


def audit_source(path: str, source: str) -> list[Finding]:
    """Every finding in one file, regardless of any diff.  Raises SyntaxError."""
    return _ModuleAudit(path, ast.parse(source, filename=path)).run()
