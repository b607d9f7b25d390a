"""The frame of the two append-only logs (docs/protocol.md §6.2-6.3): their titles, the
trend table's header, and the marker line each round's entry starts with.  Written once
when a campaign is made, checked by every append and by the preflight guard, and looked
for when an interrupted round is closed again (so no entry is appended twice).  What
goes between the markers is rendered by ``runner.render.markdown``."""

from __future__ import annotations

from runner.store.manifest import Manifest

TREND_HEADER = (
    "| Round | Status | Description | Fwd Avg TFLOPS | Fwd Peak TFLOPS | Bwd Avg TFLOPS "
    "| Bwd Peak TFLOPS | Combined Step TFLOPS | vs Baseline | Key Finding |"
)
TREND_SEPARATOR = "|---|---|---|---|---|---|---|---|---|---|"
BASELINE_MARKER = "## Basic information"


def trend_header(manifest: Manifest) -> str:
    return (
        f"# Performance trend — {manifest.campaign_name}\n\n"
        f"Append-only: one row per round; a wrong row gets a correction below it.\n\n"
        f"{TREND_HEADER}\n{TREND_SEPARATOR}\n"
    )


def trend_marker(n: int) -> str:
    return f"| round-{n} |"


# -- optimize.md --------------------------------------------------------------------
def optimize_title(manifest: Manifest) -> str:
    return (
        f"# Optimization log — {manifest.campaign_name}\n\n"
        "Append-only (docs/protocol.md §6.4): never edit or delete an entry; append a "
        "correction instead.\n"
    )


def history_marker(n: int) -> str:
    return f"### round-{n} — "


# The block `campaign report` appends once, at the end, when the campaign may end
# (upstream's optimize-loop.md: "### Termination Check" then "## Final Report").
TERMINATION_MARKER = "### Termination Check"
