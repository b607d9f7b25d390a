"""The installed wheel (tests/lib-style helpers): the wheel built from the repository,
installed into a fresh virtual environment, and ``campaign demo`` run by that
installation from an empty folder: the session's demo campaign (conftest
``demo_campaign``), asserted on by tests/test_wheel_demo.py.

Offline and quick: the wheel is built without build isolation (this interpreter's
setuptools) and installed without dependencies; the fresh environment then sees exactly
what ``pip install <wheel> torch triton`` would bring: the wheel's own requirements (no
extras), torch and triton (``BESIDE``), with everything they require in turn, linked
from this interpreter's site-packages into one folder that a ``.pth`` line names.  A
dependency a round needs at run time but the wheel does not declare (pytest, for the
focused test) is missing there, as after a real install.  The editable installs of the
development environment (``runner`` from the checkout, ``turbo_kernels``) are not
linked: the test checks that.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from importlib.metadata import Distribution, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# what a wheel is built from: the files pyproject.toml, setup.py and MANIFEST.in name
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "runner", "examples", "docs")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".pytest_cache")
DEMO_LOG = "demo.log"
# installed beside the wheel, as a user does: torch, and triton where this environment
# has it (the campaigns' environment records name its version: a demo measured without
# it would differ from the suite's later rounds on its copies, which see it)
BESIDE = ("torch", *(["triton"] if importlib.util.find_spec("triton") else []))
# a demo campaign of yours for the suite to copy instead of building one (conftest)
DEMO_DIR_ENV = "TURBO_CAMPAIGN_DEMO_DIR"


def clean_env() -> dict[str, str]:
    """No PYTHONPATH (it would show the checkout's runner, or its build metadata, to pip
    and to the installed command), no campaigns root, no user site."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CAMPAIGN_ROOT")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def run(cmd: list[str], cwd: Path, timeout: int = 300, **env: str) -> str:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**clean_env(), **env},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout[-6000:]}"
    return proc.stdout


def build_wheel(tmp: Path) -> Path:
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=IGNORE)
        else:
            shutil.copy2(path, src / name)
    dist = tmp / "dist"
    pip = [sys.executable, "-m", "pip"]
    run([*pip, "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(dist), "."], src)
    (wheel,) = dist.glob("turbo_campaign-*.whl")
    return wheel


def _closure(requirements: list[str]) -> list[Distribution]:
    """The installed distributions ``requirements`` name, and theirs, without extras."""
    seen: dict[str, Distribution] = {}
    todo = list(requirements)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        key = canonicalize_name(req.name)
        if key in seen:
            continue
        seen[key] = distribution(req.name)
        todo += seen[key].requires or []
    return list(seen.values())


def _link_dependencies(wheel: Path, dest: Path) -> None:
    """Link the top-level entries (packages, modules, dist-info) of the wheel's runtime
    dependency closure, plus torch, into ``dest``."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8")
    requires = [
        line.split(":", 1)[1].strip()
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    dest.mkdir()
    for dist in _closure([*requires, *BESIDE]):
        for file in dist.files or ():
            top = file.parts[0]
            if top == ".." or (dest / top).exists():
                continue
            (dest / top).symlink_to(Path(str(dist.locate_file(top))))


def fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp)
    site = Path(
        run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
        ).strip()
    )
    deps = tmp / "dependencies"
    _link_dependencies(wheel, deps)
    (site / "_dependencies.pth").write_text(f"{deps}\n", encoding="utf-8")
    return venv


@dataclass(frozen=True)
class InstalledDemo:
    """``campaign demo --passes 2`` run by the installed wheel from an empty folder."""

    venv: Path
    empty: Path  # the folder the demo ran in (its campaigns root is ``empty/campaigns``)
    output: str  # what the command printed

    @property
    def campaigns_root(self) -> Path:
        return self.empty / "campaigns"


def installed_demo(folder: Path) -> InstalledDemo:
    """Build the wheel, install it into a fresh venv and run its ``campaign demo`` in
    ``folder/empty`` with the suite's worker limits (from this environment); the output
    is kept in ``folder/demo.log``.  About 2-3 minutes on a 2-core host; the time limit
    only stops a hung demo."""
    wheel = build_wheel(folder)
    venv = fresh_venv(folder, wheel)
    empty = folder / "empty"
    empty.mkdir()
    output = run([str(venv / "bin" / "campaign"), "demo", "--passes", "2"], empty, 1500)
    (folder / DEMO_LOG).write_text(output, encoding="utf-8")
    return InstalledDemo(venv, empty, output)


def demo_of(campaigns_root: Path) -> InstalledDemo:
    """The installed demo whose campaigns root is ``campaigns_root`` (conftest's)."""
    folder = campaigns_root.parent.parent
    return InstalledDemo(
        folder / "venv", folder / "empty", (folder / DEMO_LOG).read_text(encoding="utf-8")
    )
