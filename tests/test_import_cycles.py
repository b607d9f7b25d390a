"""No import cycle between ``runner/``'s modules, nor its packages (docs/architecture.md §2).

Every ``import`` and ``from ... import`` of a runner module counts, those inside
functions too (a function-local import is how a cycle hides: it works until the
order of first use changes); only imports under ``if TYPE_CHECKING:`` do not, since
they never run.  The graph is read from the source with ``ast``: nothing is imported.

A package is a subpackage of ``runner`` (cli, flow, worker, ...) or one of its top-level
modules; inside the worker package (``NESTED``) each subpackage or module is a package
of its own (worker.bench, worker.fullbench, ...; its ``__init__`` is ``worker``).  The
imports between them run one way, docs/architecture.md §2 draws it.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def module_name(path: Path, base: Path) -> str:
    parts = path.relative_to(base).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node, except what sits under ``if TYPE_CHECKING:``."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        stack.extend(ast.iter_child_nodes(node))


@functools.cache
def import_graph(base: Path = ROOT) -> dict[str, set[str]]:
    """module -> the runner modules it imports (a package counts as its __init__);
    ``base`` is the folder that holds the ``runner`` package.  Read once per ``base``
    (callers do not change it)."""
    paths = {module_name(p, base): p for p in (base / "runner").rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        deps: set[str] = set()
        for node in _runtime_nodes(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names if a.name in paths)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    deps.add(sub if sub in paths else node.module)
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


# packages whose parts are layers of their own (the worker side's, in their order)
NESTED = ("worker",)


def package_of(module: str) -> str:
    """``runner.flow.validate`` -> ``flow``; ``runner.worker.bench.timing`` ->
    ``worker.bench``; ``runner.worker`` -> ``worker``; ``runner`` -> ``runner``."""
    parts = module.split(".")[1:] or ["runner"]
    return ".".join(parts[:2]) if parts[0] in NESTED else parts[0]


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """package -> the other packages its modules import."""
    packages: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for module, deps in graph.items():
        packages[package_of(module)].update(package_of(d) for d in deps)
    return {p: deps - {p} for p, deps in packages.items()}


# docs/architecture.md §2 rule 5, top to bottom: a package imports only those below it.
# The host's packages, then the worker package's parts (its entry points, the dispatcher
# and its lazy ``run_spec``, then what a pass runs), then what both sides share.
HOST = (
    "__main__",
    "cli",
    "portable",
    "flow",
    "round",
    "compare",
    "render",
    "measure",
    "executors",
    "store",
    "judge",
)
WORKER = (
    "worker.fullbench",
    "worker.__main__",
    "worker",
    "worker.dispatch",
    "worker.bench",
    "worker.cachesim",
    "worker.analyze",
    "worker.ops",
)
LAYERS = (*HOST, *WORKER, "targets", "core", "runner")


def upward(graph: dict[str, set[str]], layers: tuple[str, ...]) -> list[str]:
    """``package -> dependency`` of every import of a package above it in ``layers``."""
    return sorted(
        f"{p} -> {d}"
        for p, deps in graph.items()
        for d in deps
        if layers.index(d) < layers.index(p)
    )


def test_no_import_cycle_between_runner_packages() -> None:
    graph = package_graph(import_graph())
    assert set(graph) == set(LAYERS), "give the new package its place in LAYERS and the doc"
    assert cycles(graph) == []
    assert upward(graph, LAYERS) == [], "move what both need into the lower package"


def test_an_upward_import_is_found(tmp_path: Path) -> None:
    """compare sits below round: compare importing round at run time is upward, even
    inside a function; an annotation's import under ``TYPE_CHECKING`` is not."""
    typed = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from runner.round.context import RoundPlan\n"
    )
    local = "def confirm():\n    from runner.round.context import RoundPlan\n    return RoundPlan\n"
    found = {}
    for name, loop in (("typed", typed), ("local", local)):
        pkg = tmp_path / name / "runner"
        for sub in ("round", "compare"):
            (pkg / sub).mkdir(parents=True)
            (pkg / sub / "__init__.py").write_text("")
        (pkg / "__init__.py").write_text("")
        (pkg / "round" / "context.py").write_text("from runner.compare.loop import x\nRound = 1\n")
        (pkg / "compare" / "loop.py").write_text(f"x = 1\n{loop}")
        found[name] = upward(package_graph(import_graph(tmp_path / name)), LAYERS)
    assert found == {"typed": [], "local": ["compare -> round"]}


def test_the_host_imports_nothing_of_the_worker_package() -> None:
    """The host starts the worker only as a process (docs/architecture.md §2): what
    both sides need is in ``core`` (or ``targets``), never imported from the worker."""
    graph = package_graph(import_graph())
    assert {
        p: deps & set(WORKER) for p, deps in graph.items() if p in HOST and deps & set(WORKER)
    } == {}


def test_an_upward_import_inside_the_worker_package_is_found(tmp_path: Path) -> None:
    """The worker's parts are layers too: an op adapter importing the timing engine
    (``worker.ops`` -> ``worker.bench``) is an import back up, found as such."""
    pkg = tmp_path / "runner"
    for sub in ("worker", "worker/bench", "worker/ops"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "worker" / "bench" / "timing.py").write_text("from runner.worker.ops.gemm import x\n")
    (pkg / "worker" / "ops" / "gemm.py").write_text("x = 1\n")
    (pkg / "worker" / "ops" / "base.py").write_text("from runner.worker.bench import timing\n")
    packages = package_graph(import_graph(tmp_path))
    assert packages["worker.ops"] == {"worker.bench"} and packages["worker"] == set()
    assert cycles(packages) == [["worker.bench", "worker.ops"]]
    assert upward(packages, LAYERS) == ["worker.ops -> worker.bench"]


def test_no_import_cycle_between_runner_modules() -> None:
    graph = import_graph()
    assert len(graph) > 100  # the whole package was read
    assert cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "runner"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from runner.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from runner import a\n    return a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runner.a import x\n"
    )
    graph = import_graph(tmp_path)
    assert cycles(graph) == [["runner.a", "runner.b"]]
    assert graph["runner.c"] == set()  # TYPE_CHECKING imports never run


def test_the_cycle_finder_finds_a_cycle_between_packages(tmp_path: Path) -> None:
    """No module imports itself back, but store imports render and render store."""
    pkg = tmp_path / "runner"
    for sub in ("store", "render"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "store" / "records.py").write_text("from runner.render.markdown import row\n")
    (pkg / "render" / "markdown.py").write_text("row = 1\n")
    (pkg / "render" / "status.py").write_text("from runner.store import records\n")
    (pkg / "worker.py").write_text("from runner.store.records import row\n")
    graph = import_graph(tmp_path)
    assert cycles(graph) == []
    packages = package_graph(graph)
    assert packages["worker"] == {"store"}
    assert cycles(packages) == [["render", "store"]]


def test_render_only_reads() -> None:
    """render returns text or bytes: it imports no writer (docs/architecture.md §2)."""
    writers = {"runner.core.files", "runner.store.appendlog", "runner.store.record_writer"}
    graph = import_graph()
    writes = {m: graph[m] & writers for m in graph if m.startswith("runner.render.")}
    assert {m: w for m, w in writes.items() if w} == {}, "write it from flow through store"
    assert graph["runner.round.logs"] & writers  # the check sees a writer where one is


def benchmark_graph(base: Path = ROOT / "benchmarks") -> dict[str, set[str]]:
    """script -> the other scripts of ``benchmarks/`` it imports (they import each other
    by their bare names: a script's folder is first on its ``sys.path``)."""
    names = {p.stem for p in base.glob("*.py")}
    graph: dict[str, set[str]] = {}
    for name in names:
        deps: set[str] = set()
        for node in _runtime_nodes(ast.parse((base / f"{name}.py").read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                deps.add(node.module)
        graph[name] = (deps & names) - {name}
    return graph


def test_no_import_cycle_between_benchmark_scripts() -> None:
    graph = benchmark_graph()
    assert graph["gate_study"]  # the scripts' imports of each other were read
    assert cycles(graph) == [], "move what two scripts share into a module below both"
