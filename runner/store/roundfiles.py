"""The files of a round: the artifacts copied out of the temporary folder, the
artifact list, the lineage commit message, the one-line description of a patch."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from runner.core.artifact_names import AUDIT, BENCHMARK_CSV, BUILDS, CANDIDATE_PATCH, INCUMBENT_CSV
from runner.core.files import copy_plain_tree, write_atomic, write_json_atomic
from runner.core.outcomes import GateResult
from runner.core.pause_points import pause_point
from runner.store.appendlog import append
from runner.store.campaign import Campaign
from runner.store.fingerprint_check import record_fingerprint
from runner.store.leftovers import PARTIAL_ARTIFACTS
from runner.store.log_format import optimize_title


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
    for name in (BENCHMARK_CSV, INCUMBENT_CSV, AUDIT, BUILDS):
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


# ---- failed attempts of an open round (Rule 6: runner.flow.attempts) ---------------
ATTEMPTS = "attempts"


def list_attempts(round_dir: Path) -> list[Path]:
    """``rounds/round-N/attempts/attempt-K`` folders, in order."""
    folder = round_dir / ATTEMPTS
    if not folder.is_dir():
        return []
    found = [p for p in folder.iterdir() if p.name.removeprefix("attempt-").isdigit()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("attempt-")))


def describe_attempts(round_dir: Path) -> str | None:
    """An open round's failed attempts in words (None: none)."""
    attempts = list_attempts(round_dir)
    if not attempts:
        return None
    n = round_dir.name.removeprefix("round-")
    return (
        f"{len(attempts)} failed attempt(s), correctness FAIL (Rule 6: not a round, not a "
        f"rollback; {round_dir / ATTEMPTS}): fix the candidate and run `campaign validate "
        f"--round {n}` again"
    )


# ---- a rollback's diagnosis (Rule 7), given with the next round ---------------------
DIAGNOSIS = "diagnosis.json"


def has_diagnosis(round_dir: Path) -> bool:
    return (round_dir / DIAGNOSIS).is_file()


def write_diagnosis(campaign: Campaign, n: int, by: int, fields: dict[str, str]) -> None:
    """Round ``n``'s rollback diagnosis, given with round ``by``: ``diagnosis.json`` in
    its folder (beside its closed records, which stay as they are) and an entry at the
    end of optimize.md."""
    write_json_atomic(campaign.round_dir(n) / DIAGNOSIS, {"round": n, "given_with": by, **fields})
    lines = [
        f"- {k.replace('_', ' ').capitalize()}: {' '.join(v.split())}"
        for k, v in fields.items()
        if v
    ]
    append(
        campaign.optimize_log,
        f"\n#### round-{n} rollback diagnosis (given with round-{by})\n" + "\n".join(lines) + "\n",
        expected_prefix=optimize_title(campaign.manifest),
    )


def candidate_patches(campaign: Campaign) -> dict[int, str]:
    """Round -> the ``candidate.patch`` it recorded, for every closed VALIDATE round that
    has one (a tournament's entries too)."""
    out: dict[int, str] = {}
    for n in sorted(campaign.closed_rounds()):
        path = campaign.round_dir(n) / CANDIDATE_PATCH
        if n >= 2 and path.is_file():
            out[n] = path.read_text(encoding="utf-8", errors="replace")
    return out
