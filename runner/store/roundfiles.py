"""The files of a round: the artifacts copied out of the temporary folder, the
artifact list, the lineage commit message, the one-line description of a patch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runner.core.files import copy_plain_tree, write_atomic, write_json_atomic
from runner.core.outcomes import GateResult
from runner.core.pause_points import pause_point
from runner.store.campaign import Campaign
from runner.store.fingerprint_check import record_fingerprint
from runner.store.leftovers import PARTIAL_ARTIFACTS


def describe_patch(patch: str, touched: list[str]) -> str:
    added = sum(1 for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---"))
    return f"{', '.join(touched) or '(no files)'} (+{added} -{removed} lines)"


def store_artifacts(
    campaign: Campaign,
    number: int,
    tmp: Path,
    *,
    gate: GateResult | None = None,
    extra: dict[str, str] | None = None,
) -> None:
    """Copy the finished run's outputs from its scratch folder ``tmp`` into round
    ``number``'s artifacts: into a staging folder first, renamed into place when
    complete, so a killed copy leaves no half-written artifact (the next command removes
    the staging folder)."""
    dest = campaign.artifacts_dir(number)
    stage = dest.parent / PARTIAL_ARTIFACTS
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    for name in ("benchmark.csv", "incumbent.csv", "audit.json", "builds.json"):
        if (tmp / name).exists():
            shutil.copy2(tmp / name, stage / name)
    pause_point("artifacts")
    passes = stage / "passes"
    # the paired workers' turn log and their memory reports (the next round's prior)
    for turns in sorted([*tmp.glob("turns*.jsonl"), *tmp.glob("memory*.json")]):
        shutil.copy2(turns, stage / turns.name)
    for sub in sorted(tmp.iterdir()):
        if sub.is_dir() and sub.name != "specs":
            copy_plain_tree(sub, passes / sub.name)  # written by the candidate's code too
    if (tmp / "specs").exists():
        shutil.copytree(tmp / "specs", stage / "specs", dirs_exist_ok=True)
    if gate is not None:
        write_json_atomic(stage / "gate.json", gate.to_dict())
    for name, text in (extra or {}).items():
        write_atomic(stage / name, text)
    if dest.exists():  # files placed there earlier in this round (e.g. a fingerprint)
        shutil.copytree(dest, stage, dirs_exist_ok=True)
        shutil.rmtree(dest)
    os.replace(stage, dest)
    record_fingerprint(campaign, number)


def artifact_list(campaign: Campaign, n: int) -> list[str]:
    root = campaign.artifacts_dir(n)
    return sorted(str(p.relative_to(campaign.root)) for p in root.glob("*") if p.is_file())
