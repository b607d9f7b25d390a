"""The wheel works outside the checkout: built from the repository, installed into a
fresh virtual environment, ``campaign demo`` runs from an empty folder with the demo's
verdicts.

Offline and quick: the wheel is built without build isolation (this interpreter's
setuptools) and installed without dependencies; the fresh environment then sees exactly
what ``pip install <wheel> torch`` would bring: the wheel's own requirements (no
extras) and torch, with everything they require in turn, linked from this interpreter's
site-packages into one folder that a ``.pth`` line names.  A dependency a round needs
at run time but the wheel does not declare (pytest, for the focused test) is missing
there, as after a real install.  The editable installs of the development environment
(``runner`` from the checkout, ``turbo_kernels``) are not linked: the test checks that.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import Distribution, distribution
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
# what a wheel is built from: the files pyproject.toml, setup.py and MANIFEST.in name
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "runner", "examples", "docs")
IGNORE = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", ".pytest_cache")


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH (it would show the checkout's runner, or its build metadata, to pip
    and to the installed command), no campaigns root, no user site."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CAMPAIGN_ROOT")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def _run(cmd: list[str], cwd: Path, timeout: int = 300, **env: str) -> str:
    proc = subprocess.run(
        cmd,
        cwd=cwd,
        env={**_clean_env(), **env},
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"$ {' '.join(cmd)}\n{proc.stdout[-6000:]}"
    return proc.stdout


def _build_wheel(tmp: Path) -> Path:
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
    _run([*pip, "wheel", "-q", "--no-build-isolation", "--no-deps", "-w", str(dist), "."], src)
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
    requires = [line.split(":", 1)[1].strip() for line in text.splitlines()
                if line.startswith("Requires-Dist:")]  # fmt: skip
    dest.mkdir()
    for dist in _closure([*requires, "torch"]):
        for file in dist.files or ():
            top = file.parts[0]
            if top == ".." or (dest / top).exists():
                continue
            (dest / top).symlink_to(Path(str(dist.locate_file(top))))


def _fresh_venv(tmp: Path, wheel: Path) -> Path:
    venv = tmp / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python)]
    _run([*pip, "install", "-q", "--no-deps", "--no-index", str(wheel)], tmp)
    site = Path(
        _run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp
        ).strip()
    )
    deps = tmp / "dependencies"
    _link_dependencies(wheel, deps)
    (site / "_dependencies.pth").write_text(f"{deps}\n", encoding="utf-8")
    return venv


def _result(campaign: Path, n: int) -> dict[str, Any]:
    path = campaign / "rounds" / f"round-{n}" / "result.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


@pytest.mark.integration
def test_installed_wheel_runs_the_demo_from_an_empty_folder(tmp_path: Path) -> None:
    wheel = _build_wheel(tmp_path)
    venv = _fresh_venv(tmp_path, wheel)
    empty = tmp_path / "empty"
    empty.mkdir()
    where = _run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import importlib.util as u, runner.flow.new_campaign as n; "
            "print(n.__file__); print(n.EXAMPLES_DIR); print(u.find_spec('turbo_kernels'))",
        ],
        empty,
    ).splitlines()
    assert where[0].startswith(str(venv)), where  # the installed runner, not the checkout
    assert where[1].startswith(str(venv)) and where[1].endswith("_examples"), where
    assert where[2] == "None", where  # the example package is not importable on its own

    # about 2 minutes on an idle 2-core host; the limit only stops a hung demo
    # no verdict is asserted beyond the direction of each change: the rounds' first
    # pairs are final (no re-measurement up to the suite's cap)
    demo = [str(venv / "bin" / "campaign"), "demo", "--passes", "2"]
    out = _run(demo, empty, 1500, TURBO_CAMPAIGN_ROUND_CAP_S="1")
    lines = out.splitlines()
    assert "round-1: BASELINE" in lines, out
    assert any(line.startswith("round-2: ROLLED BACK") for line in lines), out
    campaign = Path(lines[-1].removeprefix("campaign: "))
    assert campaign.parent == (empty / "campaigns").resolve(), out
    slowdown = _result(campaign, 2)
    assert slowdown["gate"]["delta_pct"] < 0, slowdown["gate"]
    speedup = _result(campaign, 3)
    # On a quiet CPU the speed-up (about +18%) is ACCEPTED.  On a heavily loaded host
    # (seen at load 12 on 2 cores: +9% and +4% measured) the gate may not confirm it;
    # the verdict is the gate's business (tests/test_gate.py).  What this test needs is
    # that the installed wheel measured both patches to the end: the slow-down slower,
    # the speed-up faster, every round closed.
    assert speedup["status"] in ("ACCEPTED", "ROLLED BACK"), speedup["status"]
    assert speedup["gate"]["delta_pct"] > 0, speedup["gate"]
    assert all(s["check"] == "PASS" for s in speedup["score"]["shapes"]), speedup["score"]
    # the demo measured a fresh copy of the bundled package, made from the wheel's copy
    sources = list((empty / "campaigns" / "sources").iterdir())
    assert len(sources) == 1 and (sources[0] / "turbo_kernels" / "__init__.py").is_file()
    assert (sources[0] / "demo_patches" / "speedup_reuse_fp8_weight.patch").is_file()


def test_a_missing_example_package_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.core.errors import ConfigError
    from runner.flow import new_campaign as newcampaign

    assert newcampaign.examples_dir() == ROOT / "examples"  # a checkout reads it in place
    monkeypatch.setattr(newcampaign, "EXAMPLES_DIR", tmp_path / "nothing")
    with pytest.raises(ConfigError, match="built without it; reinstall"):
        newcampaign.fresh_example_copy(tmp_path / "copy")
    assert not (tmp_path / "copy").exists()
