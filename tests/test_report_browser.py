"""The HTML report in a real headless chromium: it renders, the pictures show, and the
DOM chromium built holds what a kernel engineer diagnoses from (docs/protocol.md §7.3): the
final report as HTML (no raw markdown, links that resolve), the shapes x rounds table,
every round (rolled back too) with its per-shape data, paired evidence, diff and
duration, the environment, the per-shape trend and noise plots.

The screenshot is written under tmp_path and kept in ``test-artifacts/report.png``
(git-ignored).  Skipped only when chromium is absent and $CI is unset; under CI it must
run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image as mpimg

from runner.flow.report import write_report
from runner.render.figures import fmt_gain, pair_spread
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


def _flags(browser: str, profile: Path) -> list[str]:
    return [
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
    ]


def screenshot(browser: str, page: Path, out: Path, profile: Path) -> None:
    cmd = [
        *_flags(browser, profile),
        f"--screenshot={out}",
        "--window-size=1280,2000",
        page.resolve().as_uri(),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert out.is_file(), f"chromium wrote no screenshot (exit {proc.returncode}):\n{proc.stderr}"


class Dom(HTMLParser):
    """The elements chromium serialised: (tag, attributes, text inside) for each, and
    the ids on the page."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, dict[str, str], list[str]]] = []
        self.elements: list[tuple[str, dict[str, str], str]] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {k: v or "" for k, v in attrs}
        if "id" in found:
            self.ids.add(found["id"])
        if tag not in ("img", "br", "hr", "meta", "link", "input"):
            self.open.append((tag, found, []))
        else:
            self.elements.append((tag, found, ""))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            name, found, text = self.open.pop()
            self.elements.append((name, found, "".join(text)))
            if self.open:
                self.open[-1][2].extend(text)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1][2].append(data)

    def find(self, tag: str, **attrs: str) -> list[tuple[dict[str, str], str]]:
        return [
            (a, t)
            for name, a, t in self.elements
            if name == tag
            and all(v in a.get(k, "").split() or a.get(k) == v for k, v in attrs.items())
        ]


def dump_dom(browser: str, page: Path, profile: Path) -> Dom:
    cmd = [*_flags(browser, profile), "--dump-dom", page.resolve().as_uri()]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    why = f"chromium dumped no DOM (exit {proc.returncode}):\n{proc.stderr}"
    assert "<body" in proc.stdout, why
    dom = Dom()
    dom.feed(proc.stdout)
    dom.close()
    return dom


@pytest.mark.browser
@pytest.mark.integration
def test_report_renders_in_chromium(demo_copy: Path, tmp_path: Path) -> None:
    browser = chromium()
    campaign = Campaign.load(demo_copy)
    outcome = write_report(campaign)
    check_screenshot(browser, outcome.html, tmp_path)
    dom = dump_dom(browser, outcome.html, tmp_path / "profile")
    results = campaign.results()
    # the final report and the termination check are HTML, not markdown in a <pre>
    assert not any("##" in t or "|---|" in t for _, t in dom.find("pre") if "diff --git" not in t)
    final = [t for _, t in dom.find("section", id="final-report")]
    assert final and "Final Report" in final[0]
    assert any("Termination Check" in t for _, t in dom.find("h2"))
    assert any("Baseline vs final best" in t for _, t in dom.find("h3"))
    # every link resolves: an anchor on the page, or a file that exists
    links = [a["href"] for a, _ in dom.find("a")]
    assert any(h == "#round-1" for h in links)
    for href in links:
        if href.startswith("#"):
            assert href[1:] in dom.ids, f"dead anchor {href}"
        else:
            assert (outcome.html.parent / href).exists(), f"dead link {href}"
    # the shapes x rounds table: a row per shape, a column per round
    (grid,) = dom.find("table", id="shapes-by-rounds")
    labels = [s.label for s in results[0].score.shapes]
    assert all(lb in grid[1] for lb in labels)
    assert all(f"round-{r.round} {r.status.value}" in grid[1] for r in results)
    # every round, rolled back too: per-shape data, evidence, diff, duration
    statuses = {r.status.value for r in results}
    assert "ROLLED BACK" in statuses
    for r in results:
        ((_, text),) = dom.find("section", id=f"round-{r.round}")
        assert all(lb in text for lb in labels)
        assert "Duration" in text and f"{r.started} → {r.finished}" in text
        if (campaign.round_dir(r.round) / "artifacts" / "turns.jsonl").is_file():
            assert "measuring" in text  # the span of its turns
        if r.round > 1:
            assert "diff --git" in text and "Paired gain vs incumbent" in text
            assert r.gate is not None and fmt_gain(r.gate.delta_pct, r.gate) in text
            spread = pair_spread(r.gate)
            if spread is not None:  # the gain's ± over its pairs
                assert f"({spread[1]} pairs)" in text and "±" in text
    # hypotheses are never cut mid-word in the rounds table
    cells = [(a.get("title", ""), t) for a, t in dom.find("td") if a.get("title")]
    assert len(cells) == len(results)
    for full, shown in cells:
        stem = shown.removesuffix("…")
        assert full.startswith(stem) and (stem == full or full[len(stem)] == " ")
    # the environment fingerprint
    (env,) = dom.find("table", id="environment-table")
    assert "software.torch_version" in env[1] and "host.cpu_model" in env[1]
    # the plots an engineer opens first; no fraction-of-peak chart on a CPU
    alts = {a["alt"] for a, _ in dom.find("img")}
    assert {"Rounds", "Per-shape trend", "Noise per round", "Shapes"} <= alts
    assert "Fraction of GPU peak" not in alts


def check_screenshot(browser: str, page: Path, tmp_path: Path) -> None:
    """A screenshot under tmp_path (kept in test-artifacts/) that is not blank."""
    shot = tmp_path / "report.png"
    screenshot(browser, page, shot, tmp_path / "profile")
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
