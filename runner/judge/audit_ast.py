"""AST machinery for ``runner.judge.audit``: scopes, key resolution, name conventions.

Name conventions (regexes below) decide what a name most likely holds: an activation,
grad or activation scale (``ACT_RE``), a weight (``WEIGHT_RE``), a scalar (``SCALAR_RE``),
a tokens-per-group constant (``MPG_RE``), per-group lengths (``GROUP_LENS_RE``) or a group
count (``GROUP_N_RE``).  They are heuristics; ``runner.judge.audit`` documents the rules.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

ACT_RE = re.compile(
    r"^(a|x|xs|inp|inps|input|inputs|act|acts|activations?|hidden|hidden_states?|h|lhs|tokens?"
    r"|grad|grads|grad_out|grad_outputs?|dout|dy|dx|go|gy|out|output|y|q|k|v"
    r"|(a|x|inp|input|act|activation|lhs|grad|grad_out|grad_output|dout|dy|go)_\w+"
    r"|scales?|scale_inv|amax)$",
    re.I,
)
OTHER_TENSOR_RE = re.compile(r"^(t|tensor|tensors|mat|arr|buf|src|dst)$", re.I)
WEIGHT_RE = re.compile(
    r"^(w|b|rhs|weights?|w\d+|b\d+|wt|w_t|weight_t|\w+_weights?|weights?_\w+)$", re.I
)
SCALE_TAIL = re.compile(r"(scales?|scale_inv|amax|inv)$", re.I)
NOT_TENSOR_IDS = frozenset(["self", "cls", "module", "mod", "fn", "func", "kernel", "stream"])
SCALAR_RE = re.compile(
    r"^([mnkg]|[mnkg]_\w+|num_\w+|n_\w+|block_\w+|\w+_dtype|dtype|device|trans_\w+|arch"
    r"|layout|granularity|format|\w+_size|is_\w+|use_\w+|\w+_stride|stride_\w+)$",
    re.I,
)
FWD_RE = re.compile(r"forward|backward|fwd|bwd|gemm|matmul|quant|linear|moe|expert", re.I)
GROUP_CTX_RE = re.compile(r"group|moe|expert", re.I)
MPG_RE = re.compile(
    r"^((num_)?(m|tokens?|rows?|seq)_?per_?(group|expert|g|e)s?"
    r"|(group|expert)_?(m|tokens?|rows?)_?(size|len|lens|count|num)|(group|expert)_tokens)$",
    re.I,
)
# names that usually hold per-group COUNT tensors: only a constant/constexpr/M//G is uniform
MPG_AMBIGUOUS = re.compile(r"^((num_)?tokens_per_(expert|group)s?|(group|expert)_tokens)$", re.I)
GROUP_LENS_RE = re.compile(
    r"^(group_lens|group_sizes|group_size_list|m_splits|tokens_per_expert|seg_lens|batch_sizes"
    r"|group_offs|group_offsets|m_sizes|expert_lens|num_tokens_per_expert|tokens_per_group)$",
    re.I,
)
GROUP_N_RE = re.compile(
    r"^(g|e|num_groups?|n_groups?|ngroups|group_num|group_count|num_(local_)?experts"
    r"|n_experts|nexperts|expert_num|num_e)$",
    re.I,
)
M_RE = re.compile(r"^(m|total_m|m_total|sum_m|num_tokens|n_tokens|tokens|total_tokens)$", re.I)
META = frozenset(
    "shape dtype device ndim size stride numel dim is_contiguous _version layout len "  # noqa: SIM905
    "isinstance type id element_size data_ptr".split()
)
FACTORY_RE = re.compile(
    r"compile|jit|launch|kernel|config|cfg|tune|make|build|create|get"
    r"|select|pick|heuristic|plan|prepare|program|module|buffer",
    re.I,
)
CONTAINERS = frozenset(
    "dict OrderedDict defaultdict WeakKeyDictionary WeakValueDictionary list deque".split()  # noqa: SIM905
)
_ID_FUNCS = ("id", "hash", "weakref.ref", "ref")
TENSOR_ATTRS = frozenset(
    "shape dtype device data_ptr stride numel element_size contiguous float half bfloat16 "  # noqa: SIM905
    "to t view reshape transpose abs amax clone detach is_contiguous _version".split()
)
TOKENS_RE = re.compile(
    r"^(a|x|xs|inp|inputs?|lhs|tokens?|hidden|hidden_states?|acts?|activations?|grad_out"
    r"|grad_output|dout|dy|go|(a|x|lhs|inp|input|grad_out|grad_output|go|dy)_\w+)$",
    re.I,
)
KEY_METHODS = frozenset({"get", "setdefault", "pop", "__getitem__", "__contains__"})
WRITE_METHODS = frozenset({"setdefault", "update", "__setitem__", "append", "insert"})


@dataclass
class Scope:
    node: ast.AST
    qualname: str
    parent: Scope | None
    params: dict[str, ast.arg] = field(default_factory=dict)
    assigns: dict[str, list[tuple[ast.expr, int]]] = field(default_factory=dict)
    saved: set[str] = field(default_factory=set)
    globals_: set[str] = field(default_factory=set)
    fwd_like: bool = False
    grouped: bool = False

    def chain(self) -> Iterator[Scope]:
        scope: Scope | None = self
        while scope is not None:
            yield scope
            scope = scope.parent

    def lookup(self, name: str) -> list[tuple[ast.expr, int]]:
        for scope in self.chain():
            if name in scope.params:
                return []
            if name in scope.assigns:
                return scope.assigns[name]
        return []

    def is_param(self, name: str) -> bool:
        return any(name in s.params or name in s.saved for s in self.chain())

    def ann(self, name: str) -> str:
        arg = self.params.get(name)
        return ast.unparse(arg.annotation) if arg is not None and arg.annotation else ""


def own_nodes(root: ast.AST) -> Iterator[ast.AST]:
    """Nodes of ``root``'s body, not descending into nested functions or classes."""
    stack = list(ast.iter_child_nodes(root))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            stack.extend(ast.iter_child_nodes(node))


def bind(scope: Scope, target: ast.expr, value: ast.expr, line: int) -> None:
    if isinstance(target, ast.Name):
        scope.assigns.setdefault(target.id, []).append((value, line))
    elif isinstance(target, (ast.Tuple, ast.List)):
        if "saved_tensors" in ast.unparse(value):
            scope.saved.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elts = value.elts if isinstance(value, (ast.Tuple, ast.List)) else None
        for i, elt in enumerate(target.elts):
            bind(scope, elt, elts[i] if elts and i < len(elts) else value, line)


def make_scope(node: ast.AST, parent: Scope | None, path: str) -> Scope:
    name = getattr(node, "name", "<module>")
    scope = Scope(node, f"{parent.qualname}.{name}" if parent and parent.parent else name, parent)
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                scope.params[arg.arg] = arg
    for sub in own_nodes(node):
        if isinstance(sub, ast.Assign):
            for tgt in sub.targets:
                bind(scope, tgt, sub.value, sub.lineno)
        elif isinstance(sub, (ast.AnnAssign, ast.NamedExpr)) and sub.value is not None:
            bind(scope, sub.target, sub.value, sub.lineno)
        elif isinstance(sub, ast.Global):
            scope.globals_.update(sub.names)
    scope.fwd_like = bool((parent and parent.fwd_like) or FWD_RE.search(name))
    up = parent.grouped if parent else bool(GROUP_CTX_RE.search(path))
    lens = any(GROUP_LENS_RE.match(p) or MPG_RE.match(p) for p in scope.params)
    scope.grouped = up or lens or bool(GROUP_CTX_RE.search(name))
    return scope


# ----------------------------------------------------------------------------- keys


def peel(expr: ast.expr) -> ast.expr:
    """``a.data`` / ``a.detach()`` / ``a.untyped_storage()`` -> ``a``."""
    while True:
        if isinstance(expr, ast.Attribute) and expr.attr in ("data", "_cdata"):
            expr = expr.value
        elif (
            isinstance(expr, ast.Call)
            and isinstance(expr.func, ast.Attribute)
            and (expr.func.attr in ("detach", "untyped_storage", "storage", "data_ptr"))
        ):
            expr = expr.func.value
        else:
            return expr


def identity_args(expr: ast.AST, in_arith: bool = False) -> list[tuple[ast.expr, bool]]:
    """(object, surely_a_tensor) for every identity ``expr`` uses as a value.  Pointers in
    arithmetic (``a.data_ptr() % 16``: alignment) are not identities."""
    out: list[tuple[ast.expr, bool]] = []
    if isinstance(expr, ast.Call) and expr.args and ast.unparse(expr.func) in _ID_FUNCS:
        out.append((peel(expr.args[0]), False))
    if not in_arith and isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute):
        if expr.func.attr == "data_ptr":
            out.append((peel(expr.func.value), True))
    elif not in_arith and isinstance(expr, ast.Attribute) and expr.attr == "_cdata":
        out.append((peel(expr.value), True))
    arith = in_arith or isinstance(expr, ast.BinOp)
    for child in ast.iter_child_nodes(expr):
        out += identity_args(child, arith)
    return out


class Subst(ast.NodeTransformer):
    def __init__(self, mapping: Mapping[str, ast.expr]) -> None:
        self.mapping = mapping

    def visit_Name(self, node: ast.Name) -> ast.expr:
        return self.mapping.get(node.id, node)


class Resolver:
    """Expands a key expression through local assignments and same-module helpers."""

    def __init__(self, funcs: Mapping[str, ast.FunctionDef], scopes: Mapping[ast.AST, Scope]):
        self.funcs, self.scopes = funcs, scopes

    def expand(
        self, expr: ast.expr, scope: Scope, depth: int = 3
    ) -> tuple[list[ast.expr], set[int]]:
        parts: list[ast.expr] = [expr]
        lines: set[int] = set()
        if depth <= 0:
            return parts, lines
        for node in ast.walk(expr):
            found: list[ast.expr] = []
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                for value, line in scope.lookup(node.id):
                    found.append(value)
                    lines.update(range(line, (getattr(value, "end_lineno", None) or line) + 1))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                found = self._inline(node, node.func.id, lines, depth - 1)
            for value in found:
                sub, sub_lines = self.expand(value, scope, depth - 1)
                parts += sub
                lines |= sub_lines
        return parts, lines

    def _inline(self, call: ast.Call, name: str, lines: set[int], depth: int) -> list[ast.expr]:
        """``name``'s return expressions with its parameters replaced by ``call``'s
        arguments; adds the helper's return and assignment lines to ``lines``."""
        func = self.funcs.get(name)
        if func is None:
            return []
        mapping = dict(zip([a.arg for a in func.args.args], call.args, strict=False))
        mapping.update({kw.arg: kw.value for kw in call.keywords if kw.arg})
        out = []
        for node in own_nodes(func):
            if isinstance(node, ast.Return) and node.value is not None:
                exprs, sub_lines = self.expand(node.value, self.scopes[func], depth)
                lines.update(sub_lines, range(node.lineno, (node.end_lineno or node.lineno) + 1))
                for e in exprs:
                    fresh = ast.parse(ast.unparse(e), mode="eval").body
                    out.append(Subst(mapping).visit(fresh))
        return out


def has_meta(parts: list[ast.expr], target: str, attrs: tuple[str, ...]) -> bool:
    for node in (n for p in parts for n in ast.walk(p)):
        on_target = isinstance(node, ast.Attribute) and ast.unparse(peel(node.value)) == target
        if on_target and isinstance(node, ast.Attribute) and node.attr in attrs:
            return True
        if isinstance(node, ast.Call) and ast.unparse(node.func) == "getattr":
            args = [ast.unparse(a) for a in node.args[:2]]
            if args[:1] == [target] and any(f"'{a}'" in args for a in attrs):
                return True
    return False


def last_name(expr: ast.expr) -> str | None:
    if isinstance(expr, ast.Name):
        return expr.id
    return expr.attr if isinstance(expr, ast.Attribute) else None


def classify(target: ast.expr, sure: bool, scope: Scope) -> str:
    """'skip' | 'activation' | 'weight' | 'other' (a tensor) | 'unknown'."""
    name = last_name(target)
    if name is None:
        return "other"
    if name in NOT_TENSOR_IDS:
        return "skip"
    if ACT_RE.match(name):
        return "activation"
    if WEIGHT_RE.match(name) and not SCALE_TAIL.search(name):
        param = isinstance(target, ast.Attribute) or scope.is_param(name)
        return "weight" if param else "other"
    if sure or OTHER_TENSOR_RE.match(name) or "Tensor" in scope.ann(name) or name in scope.saved:
        return "other"
    return "unknown"


def key_verdict(
    targets: Sequence[tuple[ast.expr, bool]], parts: list[ast.expr], scope: Scope
) -> tuple[str, str] | None:
    """(bucket, reason) for a key whose identities are ``targets``; None when harmless."""
    kinds: dict[str, str] = {}
    for expr, sure in targets:
        kinds.setdefault(ast.unparse(expr), classify(expr, sure, scope))
    by_kind = {k: sorted(t for t, kk in kinds.items() if kk == k) for k in set(kinds.values())}
    extra = "; adding _version/shape/dtype does not make it legal"
    if "activation" in by_kind:
        return (
            "W2",
            f"cache keyed on the identity of activation/grad/scale {by_kind['activation']}" + extra,
        )
    if "other" in by_kind:
        return (
            "W3",
            f"memoisation keyed on the identity of non-weight tensor(s) {by_kind['other']}" + extra,
        )
    for t in by_kind.get("weight", []):
        need = (("_version", ("_version",)), ("shape", ("shape", "size")))
        missing = [a for a, at in need if not has_meta(parts, t, at)]
        if missing:
            return (
                "W3",
                f"weight cache on id({t}) without {'+'.join(missing)}: stale after an update",
            )
    if "weight" in by_kind:
        return "W1", (
            f"weight cache keyed on id+_version+shape of {by_kind['weight']}: allowed, gain "
            "bounded by quant_time(weight)/step_time; needs the 8-step simulation "
            "(runner.worker.cachesim)"
        )
    if "unknown" in by_kind:
        return "ID-KEY", f"state keyed on id() of {by_kind['unknown']}: confirm it is not a tensor"
    return None


def tensor_data(expr: ast.AST, scope: Scope, depth: int = 3) -> set[str]:
    """Tensor parameters whose data ``expr`` carries, through local assignments: metadata
    reads and kernel/config/buffer factories (``compile``, ``get_*``, ``*launch*``) cut."""
    found: set[str] = set()
    stack: list[ast.AST] = [expr]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and node.attr in META:
            continue
        if isinstance(node, ast.Call):
            fname = ast.unparse(node.func).rsplit(".", 1)[-1]
            if fname in META or FACTORY_RE.search(fname):
                continue
        if isinstance(node, ast.Name) and tensor_param(node.id, scope):
            found.add(node.id)
        elif isinstance(node, ast.Name) and depth > 0:
            for value, _ in scope.lookup(node.id):
                found |= tensor_data(value, scope, depth - 1)
        stack.extend(ast.iter_child_nodes(node))
    return found


def tensor_param(name: str, scope: Scope) -> bool:
    if name in scope.saved or "Tensor" in scope.ann(name):
        return True
    hinted = ACT_RE.match(name) or WEIGHT_RE.match(name) or OTHER_TENSOR_RE.match(name)
    scalar = scope.ann(name) or name.isupper() or SCALAR_RE.match(name)
    return bool(hinted and not scalar and scope.is_param(name))


def used_as_tensor(fn: ast.AST, name: str) -> bool:
    """``name.shape``, ``name.float()``... somewhere in ``fn``."""
    return any(
        isinstance(n, ast.Attribute)
        and n.attr in TENSOR_ATTRS
        and isinstance(n.value, ast.Name)
        and n.value.id == name
        for n in ast.walk(fn)
    )


def group_count(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return bool(GROUP_N_RE.match(expr.id))
    text = ast.unparse(expr)
    m = re.match(r"^(?:len\((\w+)\)|(\w+)\.numel\(\)|(\w+)\.shape\[0\]|(\w+)\.size\(0\))$", text)
    return bool(m and GROUP_LENS_RE.match(next(g for g in m.groups() if g)))


def m_like(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Name):
        return bool(M_RE.match(expr.id))
    m = re.match(r"^(\w+)\.(?:shape\[0\]|size\(0\))$", ast.unparse(expr))
    return bool(m and ACT_RE.match(m.group(1)))


def uniform_div(expr: ast.AST) -> bool:
    """``expr`` holds ``M // G`` (tokens divided by the group count)."""
    return any(
        isinstance(n, ast.BinOp)
        and isinstance(n.op, (ast.FloorDiv, ast.Div))
        and (m_like(n.left) or group_count(n.right))
        for n in ast.walk(expr)
    )


_NONEMPTY_OPS = {
    False: ((ast.Gt, 0), (ast.GtE, 1), (ast.NotEq, 0)),
    True: ((ast.Eq, 0), (ast.LtE, 0), (ast.Lt, 1)),
}


def nonempty_test(test: ast.AST, raising: bool) -> bool:
    """``test`` (asserted, or raised on when ``raising``) says some count is > 0."""
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            for op, right in zip(node.ops, node.comparators, strict=True):
                value = right.value if isinstance(right, ast.Constant) else None
                if any(isinstance(op, o) and value == v for o, v in _NONEMPTY_OPS[raising]):
                    return True
    return False


def lens_values(test: ast.AST) -> bool:
    """A group-lens name is read for its per-group values (not through len()/numel()/
    shape, nor through a total such as ``.sum()``)."""
    stack: list[ast.AST] = [test]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Attribute) and node.attr in (*META, "sum"):
            continue
        if isinstance(node, ast.Call) and ast.unparse(node.func).rsplit(".", 1)[-1] in META:
            continue
        if isinstance(node, ast.Name) and GROUP_LENS_RE.match(node.id):
            return True
        stack.extend(ast.iter_child_nodes(node))
    return False


def is_container(value: ast.expr) -> bool:
    if isinstance(value, (ast.Dict, ast.List)):
        return True
    return isinstance(value, ast.Call) and ast.unparse(value.func).rsplit(".", 1)[-1] in CONTAINERS


def int_constant(expr: ast.expr) -> bool:
    return isinstance(expr, ast.Constant) and type(expr.value) is int


def fixed_size(expr: ast.expr) -> bool:
    if isinstance(expr, ast.Constant):
        return int_constant(expr)
    if isinstance(expr, ast.Name):
        return bool(MPG_RE.match(expr.id))
    return isinstance(expr, ast.BinOp) or (
        isinstance(expr, ast.Call) and ast.unparse(expr.func) == "int"
    )


def first_dim(args: list[ast.expr], method: str) -> ast.expr:
    shape = args[1] if method == "unflatten" and len(args) > 1 else args[0]
    if isinstance(shape, (ast.Tuple, ast.List)) and shape.elts:
        return shape.elts[0]
    return shape
