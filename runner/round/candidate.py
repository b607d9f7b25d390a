"""What a VALIDATE round does with its candidate around the measurement, the same for a
single round (``runner.flow.validate``) and for each entry of a tournament
(``runner.flow.validate``): its round folder opened with the change (its failed
attempts kept), its kernel snapshot, the static audit, the head's focused-test files put
back in its tree, the transfer check closed from the verdict, and the winner's lineage
commit (made before the records, the ref moved after them).
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.artifact_names import AUDIT, CANDIDATE_PATCH
from runner.core.files import write_atomic, write_json_atomic
from runner.core.outcomes import GateResult, TransferCheck
from runner.core.pause_points import pause_point
from runner.judge.vetoes import audit_candidate
from runner.render.summary import commit_message
from runner.round.context import RoundPlan
from runner.round.judge_files import judge_digests, restore_judge, scope_notes
from runner.round.result import behaviour_transfer
from runner.store.campaign import Campaign
from runner.store.lineage import snapshot
from runner.store.roundfiles import ATTEMPTS


def open_round_dir(campaign: Campaign, n: int, patch: str) -> None:
    """Round ``n``'s folder with the change in it; what an interrupted, unclosed
    attempt left there is removed, the round's failed attempts (Rule 6) stay."""
    round_dir = campaign.round_dir(n)
    if round_dir.is_dir():
        for path in round_dir.iterdir():
            if path.name != ATTEMPTS:
                shutil.rmtree(path) if path.is_dir() else path.unlink()
    round_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(round_dir / CANDIDATE_PATCH, patch)


@dataclass
class Audited:
    """A candidate's audit: its vetoes, the transfer check it opens, whether the audit
    rejects the change (its real gain then counts as none), the change's high-risk
    kinds, the scope notes its round records, and what its judge files must hold when
    its focused test starts (``expect``: ``runner.round.judge_files.judge_digests``,
    the lineage head's files restored in its tree; handed to the focused test)."""

    vetoes: list[str]
    transfer: TransferCheck
    rejects: bool
    risks: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    expect: dict[str, str] = field(default_factory=dict)


def audit(
    rnd: RoundPlan,
    n: int,
    out: Path,
    trees: tuple[Path, Path],
    patch: str,
    touched: Sequence[str],
    declared: Sequence[str],
    bucket: str,
) -> Audited:
    """Round ``n``'s candidate (``trees``: the incumbent's, the candidate's): every file
    the change touched snapshotted (kernel_source or declared outside it), the change
    audited (``audit.json`` into ``out``), the head's focused-test files put back in
    the candidate's tree and expected there when its focused test starts
    (``Audited.expect``, ``runner.round.judge_files``)."""
    m = rnd.manifest
    inc_tree, cand_tree = trees
    kept = [*m.kernel_source, *(p for p in touched if p not in m.kernel_source)]
    snapshot(cand_tree, kept, rnd.campaign.snapshot_dir(n))
    vetoes, transfer, report = audit_candidate(patch, list(touched), inc_tree, cand_tree, bucket)
    notes = scope_notes(declared, restore_judge(m, inc_tree, cand_tree, list(touched)))
    expect = judge_digests(m, inc_tree, list(touched))
    write_json_atomic(out / AUDIT, report.to_dict())
    risks = list(report.risks)
    return Audited(vetoes, transfer, bool(report.rejects), risks, notes, expect)


def closed_transfer(
    rnd: RoundPlan, transfer: TransferCheck, rejects: bool, gate: GateResult
) -> TransferCheck:
    """The transfer check with the verdict's gain (none as real where the audit rejects
    the change) and what the workers saw (``result.behaviour_transfer``)."""
    transfer.benchmark_gain_pct = round(gate.delta_pct, 3)
    transfer.estimated_real_gain_pct = 0.0 if rejects else round(gate.delta_pct, 3)
    return behaviour_transfer(rnd, transfer, gate)


def lineage_commit(
    rnd: RoundPlan, n: int, hypothesis: str, gate: GateResult, head: str, patch: str
) -> str:
    """The accepted round ``n``'s commit on ``head`` (no ref moves: ``advance`` does,
    once the records are written)."""
    rnd.step("lineage commit")
    message = commit_message(rnd.manifest, n, hypothesis, gate)
    return rnd.lineage.make_commit(head, patch, message)


def advance(rnd: RoundPlan, commit: str, head: str) -> None:
    """The lineage ref (and the user's branch where the manifest asks) moved to the
    accepted ``commit``: the last step of a round, after its records."""
    pause_point("advance")
    rnd.lineage.advance(commit, head, move_branch=rnd.manifest.git_commit)
