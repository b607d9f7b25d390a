"""Shared fixtures.

Session campaigns are built with ``campaign_helpers.build_once``: once per session
even when pytest-xdist runs several workers.

``demo_campaign``: ONE real demo campaign (baseline, a rolled-back slow-down, an
accepted speed-up on the bundled example package, 2 calibration passes) built once per
test session by the installed wheel (``wheel_helpers.installed_demo``: the wheel built
and installed into a fresh venv, its ``campaign demo`` run from an empty folder, which
tests/test_wheel_demo.py asserts on); the value is the campaign directory.
Tests that write into a campaign use ``demo_copy``, a private copy (with its source).
To reuse a demo built earlier (the sources it names must still exist), set
``TURBO_CAMPAIGN_DEMO_DIR`` to its campaign directory.

``slow_tiny``: the folder of ``campaign_helpers.tiny_campaign(root, "t", slow_base=True)``
(the campaign ``t`` with its baseline, its source, ``speedup.patch``) built once per
session, for the tests that need a verdict that noise cannot turn; take copies.

``slow_tiny_speedup``: the folder of a copy of ``slow_tiny`` with its round 2, the
speed-up (``campaign_helpers.speedup_round``), built once per session: the suite's
one real round of that change on that campaign, which the tests that read a closed
round of it share (tests/test_adversarial.py asserts it ACCEPTED and unflagged,
tests/test_bundle.py exports and reproduces it); take copies to write.

``copy_campaign(base, dest, name)``: a copy of a campaign built once per module (its
folder ``base`` holds the source repository and the campaigns root), repointed at the
copied source, so every test gets its own lineage without paying for a baseline.

``cpu_image``: the CPU test image for the docker tests.  Skipped only when ``docker
info`` fails and neither CI nor REQUIRE_DOCKER is set; then they must run (.ci/run
calls docker/ci-setup.sh first).  It runs ci-setup.sh once per session, which is idempotent:
it (re)builds the image from the current tree (the runner in it must match) in seconds
when the base image and the wheelhouse exist.  ``.ci/run`` builds the image before
pytest and sets ``TURBO_CAMPAIGN_CPU_IMAGE_BUILT=1`` so it is not built twice.

Parallel runs (``make test``: ``pytest -n 2``; pyproject's addopts add ``--dist loadfile
--no-loadscope-reorder``): every test of a file runs in the same xdist worker, in the
file's order (its module fixtures are built once).  Files are handed out in collection
order, which ``pytest_collection_modifyitems`` makes longest first (``FILE_SECONDS``):
the two workers then end within seconds of each other instead of one running the last
long file alone (xdist's own reorder, by number of tests, put the long one-test files
last), and the first demo user builds ``demo_campaign`` while the other worker runs a
long file that needs no demo, so neither waits on the other's build.
Files run side by side, so a test whose containers or Slurm jobs another campaign's
next command could clear (``runner.store.leftovers``, by campaign name) gives its
campaign a unique name.  Each worker gets its own GPU lease folder, and serving
workers answer within lowered limits, so a hung worker fails its test instead of the
whole run.  (``--dist loadgroup`` is no use here: pytest-xdist 3.8 renames a grouped
test's ``_nodeid``, which pytest 9.2 no longer reads, so every group was ignored.)
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import build_once
from file_seconds import FileSeconds
from wheel_helpers import DEMO_DIR_ENV, installed_demo

ROOT = Path(__file__).resolve().parent.parent
IMAGE = os.environ.get("CPU_IMAGE", "turbo-campaign/cpu:py311")
IMAGE_BUILT_ENV = "TURBO_CAMPAIGN_CPU_IMAGE_BUILT"
# The Primus-Turbo-shaped fixture package holds its own (focused) tests; they run
# inside the rebuild tests' campaigns, never in this suite's collection.
collect_ignore_glob = ["data/fake_primus_turbo/*", "data/pt_triton_stack/*"]
# A serving worker of these tests is ready within seconds and takes sub-second turns:
# minutes mean it hangs (the product's defaults are 1800 s and 900 s, for GPU compiles).
# A round whose verdict is unclear measures up to its cap (150 s quick); these tests
# plant effects far beyond their noise or assert plumbing, so 45 s bounds the suite.
WORKER_LIMITS = {
    "TURBO_CAMPAIGN_READY_TIMEOUT_S": "300",
    "TURBO_CAMPAIGN_TURN_TIMEOUT_S": "300",
    "TURBO_CAMPAIGN_ROUND_CAP_S": "45",
}


# Seconds a file takes on the 2-core CI machine, its module and session fixtures
# included: the order files start in.  The end of every run prints them
# (tests/file_seconds.py: each file over 20 s, and each worker's seconds); copy a
# file's figure from a .ci/run log here when it is new or has moved by more than a
# few percent.  The figures: that table of `.ci/run` at 86f44ef (2026-12-07) on a 2-core
# machine of CI's kind; the files marked * less what e1f98f3 saves (the work they no
# longer do).  The first demo user (test_accept) carries the
# session demo's build (~150 s).  A file not named here is short and runs after these,
# in name order; a wrong figure costs balance, never a test.
FILE_SECONDS = {
    "test_redteam.py": 320,
    "test_paired.py": 270,
    "test_rebuild.py": 240,  # * the native speed-up on its first two docker pairs
    "test_accept.py": 230,  # builds demo_campaign (the wheel's demo: ~150 s)
    "test_adversarial.py": 205,
    "test_rounds.py": 195,  # * the planted slow-down on its first pairs
    "test_faults.py": 155,  # eight attempts on three shapes
    "test_baseline_more_ops.py": 155,
    "test_docker_rounds.py": 150,  # a docker baseline and four rounds (serving workers)
    "test_workspace_mode.py": 120,
    "test_bundle.py": 105,  # a copy of slow_tiny_speedup, no baseline of its own
    "test_tournament.py": 100,  # five entries on a slow_tiny copy
    "test_slurm_executor.py": 72,
    "test_mcp_server.py": 71,  # a baseline and a round through the server
    "test_gpu_patches.py": 55,
    "test_newcomer_path.py": 50,  # two quick rounds on a slow_tiny copy (first pairs final)
    "test_progress.py": 35,
    "test_docker_executor.py": 33,
    "test_unannounced_shape.py": 33,  # one quick round on a slow_tiny copy (first pairs final)
    "test_sealed_heldout.py": 33,  # one quick round on a slow_tiny copy (first pairs final)
    "test_tamper.py": 30,  # the loaded-files record is written in a fresh interpreter
    "test_fullbench.py": 28,
    "test_profile.py": 28,  # the torch profiler over one shape of the fullbench
    "test_launch_recipes.py": 26,  # ~14 small compiles in ~10 processes
    "test_build_cache.py": 25,  # real C builds through the local executor
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Longest files first (see the module docstring); a file's tests keep their order."""
    missing = [name for name in FILE_SECONDS if not (ROOT / "tests" / name).is_file()]
    if missing:
        raise pytest.UsageError(
            f"tests/conftest.py FILE_SECONDS names {', '.join(missing)}, which tests/ no "
            "longer holds: rename or remove the entry"
        )
    items.sort(key=lambda item: -FILE_SECONDS.get(item.path.name, 0))


def pytest_configure(config: pytest.Config) -> None:
    for key, value in WORKER_LIMITS.items():
        os.environ.setdefault(key, value)
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker or not getattr(config.option, "numprocesses", None):
        # The pytest runs the campaigns start (focused tests, suites) load no plugin of
        # this suite's environment (hypothesis, anyio, xdist, timeout: about 1.6 s of CPU
        # each on 2 cores); the plugin a suite must load it names (PYTEST_PLUGINS).  Not
        # set before xdist starts its workers: they need its plugin.
        os.environ.setdefault("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    if worker:  # simulated GPUs of two workers must not wait on each other's leases
        leases = Path(tempfile.gettempdir()) / f"turbo-campaign-test-leases-{os.getpid()}"
        os.environ.setdefault("CAMPAIGN_LEASE_DIR", str(leases))
    else:  # the run's seconds per file and per worker, printed at its end (FILE_SECONDS)
        config.pluginmanager.register(FileSeconds(), "file-seconds")


@pytest.fixture(scope="session")
def demo_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(DEMO_DIR_ENV)
    if given:
        dest = tmp_path_factory.mktemp("demo") / Path(given).name
        shutil.copytree(given, dest)
        _rehome(dest)
        return dest

    # the installed wheel's `campaign demo` from an empty folder (tests/test_wheel_demo.py
    # asserts on that run): the suite runs the demo once
    folder = build_once(tmp_path_factory, "demo", installed_demo)
    root = folder / "empty" / "campaigns"
    (campaign,) = [p for p in root.iterdir() if (p / "manifest.yaml").is_file()]
    return campaign


@pytest.fixture(scope="session")
def slow_tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from campaign_helpers import tiny_campaign

    return build_once(
        tmp_path_factory, "slow-tiny", lambda root: tiny_campaign(root, "t", slow_base=True)
    )


@pytest.fixture(scope="session")
def slow_tiny_speedup(slow_tiny: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    from campaign_helpers import speedup_round

    from runner.store.campaign import Campaign

    def build(folder: Path) -> None:
        speedup_round(Campaign.load(_copy_campaign(slow_tiny, folder / "copy", "t")))

    return build_once(tmp_path_factory, "slow-tiny-speedup", build) / "copy"


@pytest.fixture
def demo_copy(demo_campaign: Path, tmp_path: Path) -> Path:
    """A private copy of the demo campaign (same name) and of its source repository
    under ``tmp_path / "campaigns"``, for tests that write into a campaign."""
    root = demo_campaign.parent
    if os.environ.get(DEMO_DIR_ENV):  # a demo of yours: its source stays where it is
        dest = tmp_path / "campaigns" / demo_campaign.name
        shutil.copytree(demo_campaign, dest, ignore=shutil.ignore_patterns(".lock"))
        _rehome(dest)
        return dest
    # The campaign with its source repository: two tests (two xdist workers) never
    # share a lineage, worktrees or leftovers.
    shutil.copytree(
        root, tmp_path / "campaigns", symlinks=True, ignore=shutil.ignore_patterns(".lock")
    )
    dest = tmp_path / "campaigns" / demo_campaign.name
    _repoint(dest, root, tmp_path / "campaigns")
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
    if os.environ.get(IMAGE_BUILT_ENV) == "1":  # .ci/run built it from this tree
        return IMAGE
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
    _repoint(dest / "campaigns" / name, base, dest)
    return dest / "campaigns" / name


def _rehome(campaign: Path) -> None:
    """A copy of a demo of yours keeps its source: the manifest's ``campaign_dir`` names
    the copy (what ``campaign relocate --source <the same source>`` records)."""
    manifest = campaign / "manifest.yaml"
    text = re.sub(r"(?m)^campaign_dir: .*$", f"campaign_dir: {campaign}", manifest.read_text())
    manifest.write_text(text, encoding="utf-8")


def _repoint(campaign: Path, old: Path, new: Path) -> None:
    """The copied campaign's manifest names the copied source (``old`` -> ``new``)."""
    manifest = campaign / "manifest.yaml"
    manifest.write_text(manifest.read_text().replace(str(old), str(new)), encoding="utf-8")


@pytest.fixture(scope="session")
def copy_campaign() -> Callable[[Path, Path, str], Path]:
    """``copy_campaign(base, dest, name)``: see the module docstring."""
    return _copy_campaign
