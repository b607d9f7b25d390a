"""Shared fixtures.

``demo_campaign``: ONE real demo campaign (baseline, a rolled-back slow-down, an
accepted speed-up on the bundled example package, ``runner.flow.demo.run_demo`` with 2
calibration passes) built once per test session; the value is the campaign directory.
Tests that write into a campaign use ``demo_copy``, a private copy.  To reuse a
demo built earlier (the sources it names must still exist), set
``TURBO_CAMPAIGN_DEMO_DIR`` to its campaign directory.

``copy_campaign(base, dest, name)``: a copy of a campaign built once per module (its
folder ``base`` holds the source repository and the campaigns root), repointed at the
copied source, so every test gets its own lineage without paying for a baseline.

``cpu_image``: the CPU test image for the docker tests.  Skipped only when ``docker
info`` fails and neither CI nor REQUIRE_DOCKER is set; then they must run (.ci/run
calls docker/ci-setup.sh first).  It runs ci-setup.sh once per session, which is idempotent:
it (re)builds the image from the current tree (the runner in it must match) in seconds
when the base image and the wheelhouse exist.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

DEMO_DIR_ENV = "TURBO_CAMPAIGN_DEMO_DIR"
ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("CPU_IMAGE", "turbo-campaign/cpu:py311")
# The Primus-Turbo-shaped fixture package holds its own (focused) tests; they run
# inside the rebuild tests' campaigns, never in this suite's collection.
collect_ignore_glob = ["data/fake_primus_turbo/*"]


@pytest.fixture(scope="session")
def demo_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(DEMO_DIR_ENV)
    root = tmp_path_factory.mktemp("demo")
    if given:
        dest = root / Path(given).name
        shutil.copytree(given, dest)
        return dest
    from runner.flow.demo import run_demo

    campaign, _ = run_demo(root, say=lambda m: None, passes=2)
    return campaign.root


@pytest.fixture
def demo_copy(demo_campaign: Path, tmp_path: Path) -> Path:
    """A private copy of the demo campaign (same name, same source repository) under
    ``tmp_path / "campaigns"``, for tests that write into a campaign."""
    dest = tmp_path / "campaigns" / demo_campaign.name
    shutil.copytree(demo_campaign, dest, ignore=shutil.ignore_patterns(".lock"))
    return dest


@pytest.fixture(scope="session")
def cpu_image() -> str:
    if subprocess.run(["docker", "info"], capture_output=True, check=False).returncode != 0:
        if os.environ.get("CI") or os.environ.get("REQUIRE_DOCKER", "") not in ("", "0"):
            pytest.fail(
                "CI or REQUIRE_DOCKER is set but the Docker daemon is not reachable: run "
                "docker/ci-setup.sh (.ci/run does) before pytest"
            )
        pytest.skip("no Docker daemon (docker info failed); run docker/ci-setup.sh")
    setup = subprocess.run(
        ["bash", str(ROOT / "docker" / "ci-setup.sh")], capture_output=True, text=True
    )
    assert setup.returncode == 0, setup.stdout + setup.stderr
    return IMAGE


def _copy_campaign(base: Path, dest: Path, name: str) -> Path:
    """Copy ``base`` (a folder with the campaign's source repository and its campaigns
    root) to ``dest`` and point the copied manifest at the copied source; returns the
    copied campaign folder ``dest/campaigns/<name>``."""
    shutil.copytree(base, dest, symlinks=True, ignore=shutil.ignore_patterns(".lock"))
    manifest = dest / "campaigns" / name / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace(str(base), str(dest)), encoding="utf-8")
    return dest / "campaigns" / name


@pytest.fixture(scope="session")
def copy_campaign() -> Callable[[Path, Path, str], Path]:
    """``copy_campaign(base, dest, name)``: see the module docstring."""
    return _copy_campaign
