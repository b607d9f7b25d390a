"""Historical tips (docs/protocol.md §6.8).

One append-only markdown file per GPU, op and backend:
``<tips_root>/<target_gpu>/<target_op>/<backend_lowercase>/tips.md``.  The tips root
is ``--tips-root``, else the environment variable ``CAMPAIGN_TIPS_ROOT``, else
``<campaigns_root>/tips``.  Tips are read before round-1 (``read_tips``) and appended
after a closed round that taught something reusable (``append_tip``), as::

    ### <YYYY-MM-DD HH:MM> round-N — ACCEPTED / ROLLED BACK

then Context, Signal, Takeaway and Applicability.  A tip never advertises an
over-fitting pattern (docs/protocol.md §8); ``check_tip_text`` refuses the obvious
ones with a keyword check.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import ConfigError, RoundOutOfOrder
from runner.core.escape import md_text
from runner.core.outcomes import RoundResult
from runner.core.timestamps import now_minute
from runner.store.appendlog import adopt, append
from runner.store.campaign import Campaign
from runner.store.lineage import UPSTREAM_TIPS_DIR
from runner.store.manifest import Manifest
from runner.store.workspace import RECORD, load_record

TIPS_ROOT_ENV = "CAMPAIGN_TIPS_ROOT"
TIPS_FILE = "tips.md"
# Primus-Turbo's tips: UPSTREAM_TIPS_DIR/<target_gpu>/<target_op>/<target_backend_lower>/
# tips.md in its own tree, target_op with its granularity (gemm_fp8_blockwise).

# (pattern, what it advertises): docs/protocol.md §8.2-8.3 (W2/W3, grouped GEMM).
_OVERFIT: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), why)
    for p, why in (
        (
            r"\bid\s*\(\s*(activation|act|input|inp|x|a|grad_out|grad_output|dout|dy)\w*\s*\)",
            "a cache keyed on id() of an activation or grad_out (bucket W2, forbidden)",
        ),
        (
            r"\bcach\w*\b[^.\n]{0,60}\b(activation|grad_out|grad_output)",
            "caching by activation or grad_out (buckets W2/W3, forbidden)",
        ),
        (
            r"\b(activation|grad_out|grad_output)\w*\b[^.\n]{0,40}\bcach",
            "caching by activation or grad_out (buckets W2/W3, forbidden)",
        ),
        (r"\bM_per_group\b", "a compile-time M_per_group (assumes a uniform token layout)"),
        (
            r"\buniform\s+(token|tokens|routing|group|groups|layout|distribution)",
            "assuming uniform tokens per expert (grouped GEMM must handle skew)",
        ),
        (
            r"\bassum\w*\b[^.\n]{0,40}\buniform\b",
            "assuming a uniform token layout (grouped GEMM must handle skew)",
        ),
    )
)


def resolve_tips_root(campaigns_root: Path, override: str | os.PathLike[str] | None) -> Path:
    """``override`` (``--tips-root``), else $CAMPAIGN_TIPS_ROOT, else <campaigns_root>/tips."""
    chosen = override or os.environ.get(TIPS_ROOT_ENV)
    return Path(chosen).resolve() if chosen else Path(campaigns_root).resolve() / "tips"


def upstream_root(manifest: Manifest) -> Path | None:
    """The upstream checkout when it has upstream's ``agent/`` folder: the campaign's
    source, or in workspace mode the tree the workspace was extracted from."""
    source = Path(manifest.source)
    root = source
    if (source / "src" / RECORD).is_file():
        root = Path(str(load_record(source)["upstream"]))
    return root if (root / "agent").is_dir() else None


def tips_path(manifest: Manifest, root: Path) -> Path:
    """Upstream's path in an upstream checkout that has ``agent/``; else under ``root``."""
    backend = manifest.target_backend.lower()
    upstream = upstream_root(manifest)
    if upstream is not None:
        folder = upstream / UPSTREAM_TIPS_DIR / manifest.target_gpu / manifest.upstream_op
        return folder / backend / TIPS_FILE
    return Path(root) / manifest.target_gpu / manifest.target_op / backend / TIPS_FILE


def tips_title(manifest: Manifest) -> str:
    return (
        f"# Historical tips — {manifest.target_gpu} / {manifest.target_op} / "
        f"{manifest.target_backend.lower()}\n\n"
        "Append-only (docs/protocol.md §6.4): one entry per lesson; correct an entry by "
        "appending a correction.\n"
    )


def read_tips(manifest: Manifest, root: Path) -> str | None:
    """The tips for this campaign's GPU, op and backend, or None when there are none
    (call it before round-1 and print what it returns)."""
    path = tips_path(manifest, root)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return text if text.strip() else None


def overfit_findings(*texts: str) -> list[str]:
    """What each over-fitting pattern found in ``texts`` advertises (empty: clean)."""
    found: list[str] = []
    for text in texts:
        for pattern, why in _OVERFIT:
            match = pattern.search(text)
            if match and why not in found:
                found.append(f"{why}: {match.group(0)!r}")
    return found


def check_tip_text(*texts: str) -> None:
    """Refuse tip text that advertises an over-fitting pattern (docs/protocol.md §8)."""
    found = overfit_findings(*texts)
    if found:
        raise ConfigError(
            "this tip advertises an over-fitting pattern (docs/protocol.md §8): "
            + "; ".join(found)
            + ". A tip must transfer to real training: rewrite it without that pattern "
            "(weight caches keyed on id(weight)+_version+shape are fine; per-call caches of "
            "activations or grad_out and uniform-token assumptions are not)"
        )


@dataclass(frozen=True)
class Tip:
    """One tip entry; empty fields are filled from the round's record."""

    round: int
    takeaway: str
    context: str = ""
    signal: str = ""
    applicability: str = ""


def _one_line(text: str) -> str:
    """One line of markdown data (``md_text``): a tip's text starts no block, no link."""
    return md_text(text)


def _defaults(tip: Tip, result: RoundResult, manifest: Manifest) -> tuple[str, str, str]:
    context = tip.context or (
        f"{manifest.campaign_name}, round-{result.round} ({result.level} validation): "
        f"{result.hypothesis}"
    )
    signal = tip.signal or (result.key_finding or "; ".join(result.reasons) or "see the summary")
    applicability = tip.applicability or (
        f"{manifest.target_op} on {manifest.target_backend} for {manifest.target_gpu}"
    )
    return context, signal, applicability


def render_tip(tip: Tip, result: RoundResult, manifest: Manifest, when: str) -> str:
    context, signal, applicability = _defaults(tip, result, manifest)
    return (
        f"\n### {when} round-{result.round} — {result.status.value}\n\n"
        f"- Context: {_one_line(context)}\n"
        f"- Signal: {_one_line(signal)}\n"
        f"- Takeaway: {_one_line(tip.takeaway)}\n"
        f"- Applicability: {_one_line(applicability)}\n"
    )


def append_tip(campaign: Campaign, root: Path, tip: Tip, *, when: str | None = None) -> Path:
    """Append ``tip`` for a closed round of ``campaign``; returns the tips file."""
    if not tip.takeaway.strip():
        raise ConfigError("the tip is empty: pass the lesson with --text TEXT")
    if tip.round not in campaign.closed_rounds():
        raise RoundOutOfOrder(
            f"round {tip.round} of {campaign.name} is not closed (no result.json); a tip is "
            "written only after its round is closed: finish the round first, then add the tip"
        )
    check_tip_text(tip.takeaway, tip.context, tip.signal, tip.applicability)
    result = campaign.load_result(tip.round)
    stamp = when or now_minute()
    path = tips_path(campaign.manifest, root)
    path.parent.mkdir(parents=True, exist_ok=True)
    title = tips_title(campaign.manifest)
    if not path.exists():
        append(path, title)
    adopt(path)  # upstream's file has no ledger: its content now is kept as it is
    ours = path.read_bytes().startswith(title.encode("utf-8"))
    entry = render_tip(tip, result, campaign.manifest, stamp)
    append(path, entry, expected_prefix=title if ours else None)
    return path
