"""Shared fixtures.

``demo_campaign``: ONE real demo campaign (baseline, a rolled-back slow-down, an
accepted speed-up on the bundled example package, ``runner.demo.run_demo`` with 2
calibration passes) built once per test session; the value is the campaign directory.
Tests that write into a campaign use ``demo_copy``, a private copy.  To reuse a
demo built earlier (the sources it names must still exist), set
``TURBO_CAMPAIGN_DEMO_DIR`` to its campaign directory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

DEMO_DIR_ENV = "TURBO_CAMPAIGN_DEMO_DIR"


@pytest.fixture(scope="session")
def demo_campaign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    given = os.environ.get(DEMO_DIR_ENV)
    root = tmp_path_factory.mktemp("demo")
    if given:
        dest = root / Path(given).name
        shutil.copytree(given, dest)
        return dest
    from runner.demo import run_demo

    campaign, _ = run_demo(root, say=lambda m: None, passes=2)
    return campaign.root


@pytest.fixture
def demo_copy(demo_campaign: Path, tmp_path: Path) -> Path:
    """A private copy of the demo campaign (same name, same source repository) under
    ``tmp_path / "campaigns"``, for tests that write into a campaign."""
    dest = tmp_path / "campaigns" / demo_campaign.name
    shutil.copytree(demo_campaign, dest, ignore=shutil.ignore_patterns(".lock"))
    return dest
