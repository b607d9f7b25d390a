"""Rounds end to end: the baseline (round-1) and each VALIDATE round.

Flow: refuse bad requests before writing anything -> fresh worktrees of the incumbent
(the lineage head) and the candidate (head + patch; a change outside the kernel scope
refused unless declared, the focused test files the head's: ``runner.flow.judge_files``)
-> focused test -> interleaved
measurement through the executor (A B B A turns of paired local workers, or B C C B
passes of fresh processes; ``runner.flow.measure``) into a temporary folder -> merged pinned
CSVs -> the gate (more paired passes when it asks) -> artifacts copied into the round
folder -> kernel snapshot -> records (summary, both logs, result.json last) -> on
ACCEPTED the lineage commit and ref update, after the records.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import ConfigError, Tampered
from runner.core.outcomes import (
    Decision,
    GateResult,
    RollbackAnalysis,
    RoundResult,
    Score,
    ShapeScore,
    Status,
    TransferCheck,
)
from runner.core.pause_points import pause_point
from runner.core.shapes import Shape
from runner.core.spec import write_json_atomic
from runner.core.timestamps import now_minute
from runner.executors.base import Executor
from runner.flow.build import built_roles, describe
from runner.flow.failures import RoundFailed
from runner.flow.judge_files import check_scope, restore_judge, scope_notes
from runner.flow.measure import measure_and_judge, measure_roles, pairing_words
from runner.flow.passes import fresh_gains, state_report
from runner.flow.round_context import (
    FocusedTest,
    FocusedTestFailed,
    Progress,
    Round,
    gpu_lease,
    level_shapes,
)
from runner.flow.tamper_check import proof
from runner.judge.vetoes import audit_candidate, state_transfer
from runner.store.appendlog import write_atomic
from runner.store.campaign import Campaign
from runner.store.fingerprint import FingerprintDiff
from runner.store.fingerprint_check import check_round_comparable, record_override
from runner.store.guard import preflight
from runner.store.leftovers import job_dir
from runner.store.lineage import Lineage, snapshot
from runner.store.manifest import branch_name
from runner.store.records import close_round
from runner.store.roundfiles import artifact_list, commit_message, describe_patch, store_artifacts
from runner.targets.registry import get_target

MIN_SIGMA = 1e-6


def now() -> str:
    return now_minute()


# ---- validate ------------------------------------------------------------------------
@dataclass(frozen=True)
class Request:
    round: int
    hypothesis: str
    patch: str | None  # None: the user's working-tree diff
    level: str = "quick"
    restore: bool = False
    bucket: str = "K1"
    pairs: int | None = None
    gpus: tuple[int, ...] = ()
    allow_env_mismatch: str | None = None  # compare despite a fingerprint difference (why)
    # Paths outside kernel_source the change may touch (declared; recorded in the round).
    allow_outside: tuple[str, ...] = ()


def validate_round(
    campaign: Campaign, executor: Executor, request: Request, *, progress: Progress = print
) -> RoundResult:
    """One VALIDATE round; refuses bad requests before writing anything."""
    with campaign.lock():
        preflight(campaign, progress)
        expected = campaign.next_round()
        if expected == 1:
            raise ConfigError("no baseline yet: run `campaign baseline` first")
        if request.round != expected:
            raise ConfigError(
                f"round {request.round} is not the next round: round-{expected - 1} is the last "
                f"closed one, so run `campaign validate --round {expected}` (round numbers "
                "are never reused)"
            )
        if not request.hypothesis.strip():
            raise ConfigError("state the hypothesis before the change: --hypothesis TEXT")
        lineage = Lineage(
            Path(campaign.manifest.source), campaign.name, branch_name(campaign.manifest)
        )
        patch = request.patch if request.patch is not None else lineage.working_tree_patch()
        touched = lineage.check_patch(patch)
        target = get_target(campaign.manifest.target)
        declared = check_scope(campaign.manifest, target, touched, request.allow_outside)
        best = _current_best(campaign)
        diffs = check_round_comparable(campaign, best.round, request.allow_env_mismatch)
        started = now()
        with (
            gpu_lease(request.gpus, campaign, request.round),
            job_dir(campaign.root, campaign.name) as tmp,
        ):
            rnd = Round(
                campaign, executor, progress, tmp, request.round, request.level,
                tuple(request.gpus),
            )  # fmt: skip
            return _validate_in(rnd, request, patch, touched, started, diffs, declared)


def _validate_in(
    rnd: Round,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    diffs: Sequence[FingerprintDiff],
    declared: Sequence[str] = (),
) -> RoundResult:
    campaign, m = rnd.campaign, rnd.manifest
    round_dir = campaign.round_dir(rnd.round)
    shutil.rmtree(round_dir, ignore_errors=True)  # an interrupted, unclosed attempt
    round_dir.mkdir(parents=True)
    rnd.step("candidate tree")
    write_atomic(round_dir / "candidate.patch", patch)
    best = _current_best(campaign)
    blocking = [d for d in diffs if d.perf_relevant]
    if request.allow_env_mismatch and blocking:
        record_override(campaign, rnd.round, request.allow_env_mismatch, blocking, best.round)
    lineage = rnd.lineage
    head = lineage.head()
    shapes = level_shapes(m, request.level)
    notes: list[str] = []
    try:
        with lineage.worktree(head) as inc_tree, lineage.worktree(head, patch) as cand_tree:
            pause_point("candidate-tree")
            # every file the change touched, kernel_source or declared outside it
            kept = [*m.kernel_source, *(p for p in touched if p not in m.kernel_source)]
            snapshot(cand_tree, kept, campaign.snapshot_dir(rnd.round))
            vetoes, transfer, report = audit_candidate(
                patch, touched, inc_tree, cand_tree, request.bucket
            )
            notes = scope_notes(declared, restore_judge(m, inc_tree, cand_tree, touched))
            write_json_atomic(rnd.tmp / "audit.json", report.to_dict())
            roles = {"incumbent": inc_tree, "candidate": cand_tree}
            # each role's tree read-only to the other's builds and jobs, the proof around
            # the measurement (runner.flow.build, runner.flow.tamper_check)
            with built_roles(rnd, roles, touched) as builds, proof(rnd, roles):
                gate, inc_score, cand_score = _measure_and_judge(
                    rnd, request, inc_tree, cand_tree, shapes, vetoes
                )
    except (RoundFailed, Tampered) as exc:
        why = "\n".join([str(exc), *notes])
        return _close_failed(rnd, request, patch, touched, started, best, why)
    commit = None
    message = ""
    if gate.decision.accepted:
        rnd.step("lineage commit")
        message = commit_message(m, rnd.round, request.hypothesis, gate)
        commit = lineage.make_commit(head, patch, message)
    result = _round_result(
        rnd, request, patch, touched, started, gate, cand_score, inc_score, best, commit
    )
    if builds:
        result.reasons.append(describe(builds))
    result.reasons.extend(notes)
    transfer.benchmark_gain_pct = round(gate.delta_pct, 3)
    transfer.estimated_real_gain_pct = 0.0 if report.rejects else round(gate.delta_pct, 3)
    result.transfer = _behaviour_transfer(rnd, transfer, gate)
    close_round(campaign, result, progress=rnd.step)
    if commit:
        pause_point("advance")
        lineage.advance(commit, head, move_branch=m.git_commit)
    elif request.restore:
        lineage.restore_user_tree(touched)
    return result


def _measure_and_judge(
    rnd: Round,
    request: Request,
    inc_tree: Path,
    cand_tree: Path,
    shapes: list[Shape],
    vetoes: list[str],
) -> tuple[GateResult, Score, Score]:
    m = rnd.manifest
    failed = f"focused test failed on the candidate ({m.test_command}):\n"
    with FocusedTest(rnd, "candidate", cand_tree) as test:
        if (vetoes or test.done) and not test.wait():  # a vetoed round still records it
            vetoes.append(failed + test.tail)
        if vetoes:
            return _veto_only(rnd, vetoes, shapes)
        samples = 2 * (request.pairs or m.pairs)
        trees = {"incumbent": inc_tree, "candidate": cand_tree}
        try:
            got = measure_and_judge(rnd, trees, shapes, samples, vetoes=vetoes)
        except FocusedTestFailed as exc:  # it ran beside the workers' start-up
            return _veto_only(rnd, [*vetoes, failed + exc.tail], shapes)
    return got.gate, got.reference, got.candidate


def _behaviour_transfer(rnd: Round, transfer: TransferCheck, gate: GateResult) -> TransferCheck:
    """The transfer check updated from what the workers saw: state kept between calls
    (the 8-step simulation's hit rate) and the paired real-training-step gain."""
    passes = {
        role: sorted(rnd.tmp.glob(f"pass-*-{role}/benchmark.csv"))
        for role in ("incumbent", "candidate")
    }
    if not passes["candidate"]:
        return transfer
    fresh = fresh_gains(passes["incumbent"], passes["candidate"])
    return state_transfer(
        transfer, state_report(passes["candidate"]), state_report(passes["incumbent"]), gate,
        fresh,
    )  # fmt: skip


def _veto_only(
    rnd: Round, vetoes: list[str], shapes: list[Shape]
) -> tuple[GateResult, Score, Score]:
    metric = rnd.manifest.primary_metric
    empty = Score(
        metric, 0.0, tuple(ShapeScore(s.label, "FAIL", None) for s in shapes), 0, len(shapes)
    )
    gate = GateResult(Decision.ROLLED_BACK, metric, 0.0, 0.0, 0.0, (), (), tuple(vetoes))
    return gate, empty, empty


def _current_best(campaign: Campaign) -> RoundResult:
    best = campaign.last_accepted()
    if best is None:
        raise ConfigError("no accepted round (not even the baseline) is recorded")
    return best


def _baseline_score(campaign: Campaign) -> Score:
    return campaign.load_result(1).score


def _round_result(
    rnd: Round,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    gate: GateResult,
    cand: Score,
    inc: Score,
    best: RoundResult,
    commit: str | None,
) -> RoundResult:
    campaign, m = rnd.campaign, rnd.manifest
    rnd.step("artifacts")
    store_artifacts(rnd, campaign.artifacts_dir(rnd.round), gate=gate)
    status = Status.ACCEPTED if gate.decision.accepted else Status.ROLLED_BACK
    change = describe_patch(patch, touched)
    rollback = None
    if status is Status.ROLLED_BACK:
        rollback = RollbackAnalysis(
            change=change,
            expected=request.hypothesis,
            actual=f"{gate.delta_pct:+.3f}% geomean vs the incumbent; " + "; ".join(gate.reasons),
            root_cause="the measured effect did not support the hypothesis (see Results)",
            lesson="record the direction as ineffective unless a profile shows otherwise",
        )
    return RoundResult(
        round=rnd.round,
        status=status,
        level=request.level,
        hypothesis=request.hypothesis,
        change=change,
        description=request.hypothesis.strip().splitlines()[0][:80],
        started=started,
        finished=now(),
        test_command=m.test_command,
        benchmark_command=m.benchmark_command,
        score=cand,
        baseline=_baseline_score(campaign),
        best=inc,
        gate=gate,
        reasons=list(gate.reasons),
        artifacts=artifact_list(campaign, rnd.round),
        attribution=f"single change to {', '.join(touched)}; incumbent and candidate measured "
        f"on the same device, {pairing_words(rnd.executor)}",
        next_direction="continue along this direction"
        if status is Status.ACCEPTED
        else "diagnose and try another approach to the same bottleneck",
        key_finding=f"{gate.decision.value}: geomean {gate.delta_pct:+.3f}% vs incumbent",
        rollback=rollback,
        commit=commit,
    )


def _close_failed(
    rnd: Round,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    best: RoundResult,
    why: str,
) -> RoundResult:
    campaign, m = rnd.campaign, rnd.manifest
    rnd.step("artifacts")
    store_artifacts(rnd, campaign.artifacts_dir(rnd.round))
    labels = [s.label for s in best.score.shapes]
    empty = Score(
        m.primary_metric, 0.0, tuple(ShapeScore(lb, "FAIL", None) for lb in labels), 0, len(labels)
    )
    result = RoundResult(
        round=rnd.round,
        status=Status.FAILED,
        level=request.level,
        hypothesis=request.hypothesis,
        change=describe_patch(patch, touched),
        description=request.hypothesis.strip().splitlines()[0][:80],
        started=started,
        finished=now(),
        test_command=m.test_command,
        benchmark_command=m.benchmark_command,
        score=empty,
        baseline=_baseline_score(campaign),
        best=best.score,
        gate=None,
        reasons=[why],
        artifacts=artifact_list(campaign, rnd.round),
        key_finding=("TAMPERED: " if why.startswith("TAMPERED") else "worker failed; ")
        + "nothing in the lineage changed",
        rollback=RollbackAnalysis(
            describe_patch(patch, touched),
            request.hypothesis,
            "the measurement did not complete",
            why.splitlines()[0],
            "fix the crash before measuring again",
        ),
    )
    close_round(campaign, result, progress=rnd.step)
    return result


__all__ = ["Request", "RoundFailed", "measure_roles", "validate_round"]
