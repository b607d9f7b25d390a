"""The HTML report in a real headless chromium: it renders, and the pictures show.

The screenshot is kept in ``test-artifacts/report.png`` (git-ignored).  Skipped only
when chromium is absent and $CI is unset; under CI it must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.render.html_report import write_report
from runner.store.campaign import Campaign

ARTIFACTS = Path(__file__).resolve().parent.parent / "test-artifacts"
MIN_BYTES = 20_000


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    if os.environ.get("CI"):
        pytest.fail("CI is set but chromium is not installed: apt-get install -y chromium")
    pytest.skip("chromium is not installed (apt-get install -y chromium) and CI is unset")


def screenshot(browser: str, page: Path, out: Path, profile: Path) -> None:
    cmd = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--screenshot={out}",
        "--window-size=1280,2000",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert out.is_file(), f"chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr}"


@pytest.mark.browser
@pytest.mark.integration
def test_report_renders_in_chromium(demo_copy: Path, tmp_path: Path) -> None:
    browser = chromium()
    outcome = write_report(Campaign.load(demo_copy))
    shot = tmp_path / "report.png"
    screenshot(browser, outcome.html, shot, tmp_path / "profile")
    ARTIFACTS.mkdir(exist_ok=True)
    kept = ARTIFACTS / "report.png"
    shutil.copy2(shot, kept)
    assert kept.stat().st_size > MIN_BYTES
    pixels = np.asarray(mpimg.imread(kept))
    assert pixels.ndim == 3 and pixels.shape[0] >= 1000
    flat = pixels[..., :3].reshape(-1, 3)
    assert len(np.unique(flat[:: max(1, len(flat) // 200_000)], axis=0)) > 50  # not one colour
    green = (flat[:, 1] > 0.5) & (flat[:, 0] < 0.35) & (flat[:, 2] < 0.35)
    assert green.sum() > 500  # the plots' green (accepted / final best) is on screen
