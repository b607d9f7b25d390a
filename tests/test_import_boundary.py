"""The import rule of docs/architecture.md §2, checked in fresh interpreters.

* The worker side (the ``runner/worker/`` package, ``targets/``, ``core/``) imports,
  and a real worker pass runs, with pydantic and the host-only libraries made
  unimportable: a GPU machine may have torch and nothing else.
* The host side (CLI, flows, judge, store, render, portable, executors) imports with
  torch and triton made unimportable: the ``campaign`` command needs no GPU stack.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, save_spec

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "runner"
EXAMPLES = ROOT / "examples"
HOST_ONLY = (
    "pydantic",
    "pydantic_core",
    "docker",
    "mcp",
    "tabulate",
    "matplotlib",
    "click",
    "rich",
)
GPU_STACK = ("torch", "triton")  # numpy stays: matplotlib needs it

# A meta-path finder that refuses the named top-level packages, installed before
# anything of the runner is imported; then the named modules are imported (or the
# module given with --run is run as __main__ with the remaining arguments).
BLOCKER = """
import importlib, runpy, sys
blocked = set(sys.argv[1].split(","))
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in blocked:
            raise ImportError(f"{name} is not importable on this side of the seam")
        return None
sys.meta_path.insert(0, Blocker())
if sys.argv[2] == "--run":
    sys.argv = [sys.argv[3], *sys.argv[4:]]
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
else:
    failed = []
    for name in sys.argv[2].split(","):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            failed.append(f"{name}: {exc}")
    print("\\n".join(failed))
    sys.exit(1 if failed else 0)
"""


def modules(*folders: str, top: tuple[str, ...] = ()) -> list[str]:
    names = [f"runner.{t}" for t in top]
    for folder in folders:
        for path in sorted((RUNNER / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            names.append(".".join(parts))
    return names


def blocked_run(
    blocked: tuple[str, ...], *args: str, cwd: Path = ROOT
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", BLOCKER, ",".join(blocked), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{ROOT}{':'}{EXAMPLES}"},
    )


HOST_PACKAGES = (
    "cli",
    "flow",
    "round",
    "compare",
    "measure",
    "judge",
    "store",
    "render",
    "portable",
    "executors",
)
WORKER_SIDE = modules("worker", "targets", "core")
HOST_SIDE = modules(*HOST_PACKAGES)


def test_every_module_belongs_to_a_side() -> None:
    folders = [p.name for p in RUNNER.iterdir() if (p / "__init__.py").is_file()]
    top = tuple(p.stem for p in RUNNER.glob("*.py") if p.stem not in ("__init__", "__main__"))
    on_disk = set(modules(*folders, top=top))
    assert on_disk - set(WORKER_SIDE) - set(HOST_SIDE) == set(), "give it a side here"
    # runner/ itself holds no code: the CLI's entry point and the package marker; the
    # rest lives in the package of its side and layer
    assert sorted(p.name for p in RUNNER.glob("*.py")) == ["__init__.py", "__main__.py"]


MAX_FUNCTION_LINES = 60


def long_functions(root: Path, limit: int = MAX_FUNCTION_LINES) -> dict[str, int]:
    """``path::name`` -> lines of every function or method under ``root/runner`` over
    ``limit`` lines, from its ``def`` to its last line (docstring and nested functions
    included)."""
    found = {}
    for path in sorted((root / "runner").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = (node.end_lineno or node.lineno) - node.lineno + 1
                if n > limit:
                    found[f"{path.relative_to(root).as_posix()}::{node.name}"] = n
    return found


def test_no_function_is_over_60_lines(tmp_path: Path) -> None:
    """A function over about 60 lines does more than one thing: split it along what its
    parts do (a module's size is no rule: it holds one concern, however long)."""
    long = long_functions(ROOT)
    assert long == {}, f"split these: {long}"
    (tmp_path / "runner").mkdir()
    body = "".join(f"    x{i} = {i}\n" for i in range(59))
    method = "".join(f"        y{i} = {i}\n" for i in range(59))  # 60 lines with its def
    (tmp_path / "runner" / "m.py").write_text(
        f"class C:\n    def ok(self):\n{method}\n\ndef f():\n{body}    return 1\n"
    )
    assert long_functions(tmp_path) == {"runner/m.py::f": 61}


def packed_lines(root: Path) -> list[str]:
    """``path:line`` of every line of the project's own code under ``root`` (runner,
    tests, benchmarks) that tells the formatter to leave it as written (its skip or off
    comment).  Not the targets' code: the example package's kernels and the upstream-
    shaped files under tests/data keep their layout, which their patches apply to."""
    found = []
    for folder in ("runner", "tests", "benchmarks"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.is_relative_to(root / "tests" / "data"):
                continue
            for k, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(r"#\s*fmt:\s*(skip|off)\b", line):
                    found.append(f"{path.relative_to(root).as_posix()}:{k}")
    return found


def test_no_line_is_packed_past_the_formatter(tmp_path: Path) -> None:
    """A function meets the 60-line rule by being split, never by lines the formatter
    was told to leave packed."""
    assert packed_lines(ROOT) == []
    (tmp_path / "runner").mkdir()
    marker = "# fmt" + ": skip"  # spelt apart: this file holds no such line itself
    (tmp_path / "runner" / "m.py").write_text(f"x = [1,\n     2]  {marker}\n")
    assert packed_lines(tmp_path) == ["runner/m.py:2"]


BUILTIN_ERRORS = frozenset(
    {
        "BaseException",
        "Exception",
        "RuntimeError",
        "ValueError",
        "OSError",
        "KeyError",
        "TypeError",
        "LookupError",
    }
)


def stray_errors(root: Path, packages: tuple[str, ...]) -> list[str]:
    """``path::Class`` of every public exception class defined in the host-side
    ``packages`` under ``root/runner`` outside ``runner/core/errors.py``: a class whose
    base is a built-in error or a class of that module."""
    from runner.core import errors

    known = BUILTIN_ERRORS | {
        name
        for name, obj in vars(errors).items()
        if isinstance(obj, type) and issubclass(obj, BaseException)
    }
    found = []
    for package in packages:
        for path in sorted((root / "runner" / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.ClassDef) or node.name.startswith("_"):
                    continue
                bases = {
                    b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "")
                    for b in node.bases
                }
                if bases & known:
                    found.append(f"{path.relative_to(root).as_posix()}::{node.name}")
    return found


def test_every_host_side_error_is_in_the_one_tree(tmp_path: Path) -> None:
    """pip's model: one module holds the exception tree, so a caller or a test finds
    every case it can tell apart in one place (a module's private control-flow
    exception, ``_Name``, stays where it is used)."""
    assert stray_errors(ROOT, HOST_PACKAGES) == []
    (tmp_path / "runner" / "flow").mkdir(parents=True)
    (tmp_path / "runner" / "flow" / "m.py").write_text(
        "from runner.core import errors\n\nclass _Inner(Exception): ...\n\n"
        "class Mine(errors.ConfigError): ...\n\nclass Plain(RuntimeError): ...\n"
    )
    assert stray_errors(tmp_path, ("flow",)) == [
        "runner/flow/m.py::Mine",
        "runner/flow/m.py::Plain",
    ]


def test_the_worker_side_imports_without_pydantic_and_host_libraries() -> None:
    done = blocked_run(HOST_ONLY, ",".join(WORKER_SIDE))
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_worker_pass_runs_without_pydantic_and_host_libraries(tmp_path: Path) -> None:
    """Lazy imports count too: a real pass on the example package's CPU path."""
    shape = Shape("tiny-16x32x64", m=16, n=32, k=64)
    timing = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=2, batch_s=0.005, budget_s=0.05)
    spec = RoundSpec(
        "seam",
        1,
        "baseline",
        1,
        "quick",
        "example",
        "gemm",
        {"backend": "TORCH"},
        (shape,),
        timing,
        device="cpu",
    )
    save_spec(tmp_path / "spec.json", spec)
    out = tmp_path / "out"
    done = blocked_run(HOST_ONLY, "--run", "runner.worker", str(tmp_path / "spec.json"), str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    rows = (out / "benchmark.csv").read_text(encoding="utf-8").splitlines()
    assert rows[1].startswith("tiny-16x32x64,") and ",PASS," in rows[1], rows


def test_the_focused_test_mode_runs_without_torch(tmp_path: Path) -> None:
    """A worker in test mode imports no torch (the test command's own interpreter
    imports the target): every round's focused test saves that import."""
    command = "python -c 'print(\"focused ok\")'"
    spec = RoundSpec(
        "seam",
        2,
        "candidate",
        0,
        "quick",
        "example",
        "gemm",
        {"backend": "TORCH"},
        (),
        TimingSettings(),
        device="cpu",
        mode="test",
        command=command,
    )
    save_spec(tmp_path / "spec.json", spec)
    out = tmp_path / "out"
    blocked = (*HOST_ONLY, *GPU_STACK)
    done = blocked_run(blocked, "--run", "runner.worker", str(tmp_path / "spec.json"), str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "focused ok" in (out / "test.log").read_text(encoding="utf-8")


def test_quick_scripts_find_run_spec_in_the_worker_package() -> None:
    """A baseline's quick_test_bench.py imports ``run_spec`` from ``runner.worker`` (as
    did those written before the worker was split): served lazily by the package,
    nothing else is, and importing the package alone loads no module of it."""
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, runner.worker; print(json.dumps([*sys.modules]))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    loaded = {m for m in json.loads(done.stdout) if m.startswith("runner.")}
    assert loaded == {"runner.worker"}, loaded
    from runner.flow.quickscript import TEMPLATE

    assert "from runner.worker import run_spec" in TEMPLATE
    import runner.worker as worker
    from runner.worker.bench import worker_pass

    assert worker.run_spec is worker_pass.run_spec
    assert worker.resolve_device is worker_pass.resolve_device
    with pytest.raises(AttributeError, match="no attribute 'time_case'"):
        _ = worker.time_case


def test_the_host_side_imports_without_torch() -> None:
    done = blocked_run(GPU_STACK, ",".join(HOST_SIDE))
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("blocked", [HOST_ONLY, GPU_STACK])
def test_the_blocker_really_blocks(blocked: tuple[str, ...]) -> None:
    """The finder refuses what it names, so the tests above can fail."""
    done = blocked_run(blocked, blocked[0])
    assert done.returncode == 1 and "not importable on this side" in done.stdout
