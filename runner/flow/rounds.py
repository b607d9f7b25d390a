"""A VALIDATE round end to end (the baseline, round-1, is ``runner.flow.baseline``).

Flow: refuse bad requests before writing anything -> fresh worktrees of the incumbent
(the lineage head) and the candidate (head + patch; a change outside the kernel scope
refused unless declared, the focused test files the head's: ``runner.round.judge_files``)
-> focused test -> interleaved
measurement through the executor (A B B A turns of paired local workers, or B C C B
passes of fresh processes; ``runner.compare.loop``) into a temporary folder -> merged pinned
CSVs -> the gate (more paired passes when it asks) -> artifacts copied into the round
folder -> kernel snapshot -> records (summary, both logs, result.json last) -> on
ACCEPTED the lineage commit and ref update, after the records; on ROLLED BACK or
FAILED the user's checkout back to the lineage head, the edit kept
(``runner.flow.checkout``), before the records.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path

from runner.compare.loop import Comparison, Judged, measure_and_judge, measure_roles
from runner.compare.shapes import level_shapes
from runner.core.errors import ConfigError, FocusedTestFailed, MeasurementFailed, Tampered
from runner.core.isa_facts import KernelFacts
from runner.core.limits import block_pairs
from runner.core.outcomes import (
    GateResult,
    RoundResult,
    Score,
)
from runner.core.pause_points import pause_point
from runner.core.shapes import Shape
from runner.core.step_times import StepTime, StepTimes
from runner.executors.base import BuiltRole, Executor
from runner.flow.attempts import correctness_only, record_attempt
from runner.flow.checkout import kept_note, plan_restore, restore_checkout
from runner.judge.confirmation import confirmation_due
from runner.judge.false_accept import against_what_is_left
from runner.judge.resubmission import names_in
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.render.figures import fmt_gain
from runner.round.build import built_roles, describe
from runner.round.candidate import (
    Audited,
    advance,
    audit,
    closed_transfer,
    lineage_commit,
    open_round_dir,
)
from runner.round.context import FocusedTest, Progress, RoundPlan, open_round
from runner.round.judge_files import check_scope
from runner.round.kernel_facts import FactsJob
from runner.round.logs import close_round
from runner.round.result import (
    Request,
    attach_facts,
    check_diagnosis,
    check_new,
    check_round_number,
    check_targeted,
    current_best,
    failed_result,
    now,
    round_result,
    veto_only,
)
from runner.round.tamper_check import proof
from runner.round.upstream_quick import QuickCheck, has_upstream_quick
from runner.store.campaign import Campaign
from runner.store.fingerprint import FingerprintDiff
from runner.store.fingerprint_check import check_round_comparable, record_override
from runner.store.guard import locked
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name
from runner.store.roundfiles import write_diagnosis
from runner.targets.registry import manifest_target

MIN_SIGMA = 1e-6


def validate_round(
    campaign: Campaign, executor: Executor, request: Request, *, progress: Progress = print
) -> RoundResult:
    """One VALIDATE round; refuses bad requests before writing anything."""
    times = StepTimes()  # from the start: the checks below are the round's time too
    with locked(campaign, progress):
        check_round_number(campaign, request.round)
        if not request.hypothesis.strip():
            raise ConfigError("state the hypothesis before the change: --hypothesis TEXT")
        diagnosed = check_diagnosis(campaign, request)
        lineage = Lineage(
            Path(campaign.manifest.source), campaign.name, branch_name(campaign.manifest)
        )
        patch = request.patch if request.patch is not None else lineage.working_tree_patch()
        touched = lineage.check_patch(patch)
        again = check_new(
            campaign,
            request.hypothesis,
            patch,
            lambda p: names_in(lineage.text_at_head(p)),
            resubmit=request.resubmit,
        )
        check_targeted(request, level_shapes(campaign.manifest, request.level))
        target = manifest_target(campaign.manifest)
        declared = check_scope(campaign.manifest, target, touched, request.allow_outside)
        restores = plan_restore(
            lineage, patch, from_checkout=request.patch is None, restore=request.restore
        )
        best = current_best(campaign)
        diffs = check_round_comparable(campaign, best.round, request.allow_env_mismatch)
        started = now()
        if diagnosed is not None:
            write_diagnosis(campaign, diagnosed, request.round, dict(request.diagnosis))
        times.add(StepTime("checks before the round", 0.0, times.now()))
        with open_round(
            campaign,
            executor,
            progress,
            request.round,
            request.level,
            request.gpus,
            times=times,
        ) as rnd:
            return _validate_in(
                rnd, request, patch, touched, started, diffs, declared, restores, again=again
            )


def _validate_in(
    rnd: RoundPlan,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    diffs: Sequence[FingerprintDiff],
    declared: Sequence[str] = (),
    restores: bool = False,
    *,
    again: int | None = None,
) -> RoundResult:
    """The opened round measured, judged and closed; ``again``: the rolled-back round
    whose code a ``--resubmit`` patch runs again (``check_new``), its verdict judged
    against what is left of the campaign's false-accept budget."""
    campaign, m = rnd.campaign, rnd.manifest
    best = _open_round(rnd, request, patch, diffs)
    lineage = rnd.lineage
    head = lineage.head()
    shapes = level_shapes(m, request.level, rnd.round)
    notes: list[str] = []
    facts: FactsJob | None = None  # a failed round records them too (docs/analysis.md)
    try:
        with contextlib.ExitStack() as trees:
            roles, audited = _audited_trees(rnd, trees, head, request, patch, touched, declared)
            notes = audited.notes
            facts = FactsJob(rnd, roles)
            gate, inc_score, cand_score, builds = _guarded(
                rnd, request, roles, touched, shapes, audited, facts
            )
    except (MeasurementFailed, Tampered) as exc:
        why = "\n".join([str(exc), *notes])
        recorded = facts.result() if facts is not None else None
        return _closed_failure(rnd, request, patch, touched, started, best, why, recorded, restores)
    _refuse_incorrect(rnd, request, patch, gate, notes, facts.result())
    if again is not None:
        gate = against_what_is_left(gate, again, campaign.results())
    commit = None
    if gate.decision.accepted:
        with rnd.times.step("lineage commit"):
            commit = lineage_commit(rnd, rnd.round, request.hypothesis, gate, head, patch)
    with rnd.times.step("round result"):
        result = round_result(
            rnd, request, patch, touched, started, gate, cand_score, inc_score, best, commit
        )
    if builds:
        result.reasons.append(describe(builds))
    result.reasons.extend(notes)
    attach_facts(rnd, result, facts.result())
    with rnd.times.step("transfer check"):
        result.transfer = closed_transfer(rnd, audited.transfer, audited.rejects, gate)
    with rnd.times.step("checkout"):
        after = [] if commit else _checkout_after(rnd, request, patch, touched, restores)
    result.reasons.extend(after)
    close_round(campaign, result, progress=rnd.step, times=rnd.times)
    if commit:
        advance(rnd, commit, head)
    return result


def _audited_trees(
    rnd: RoundPlan,
    trees: contextlib.ExitStack,
    head: str,
    request: Request,
    patch: str,
    touched: list[str],
    declared: Sequence[str],
) -> tuple[dict[str, Path], Audited]:
    """The incumbent's and the candidate's worktrees of ``head`` (closed with ``trees``)
    and the candidate's audit."""
    with rnd.times.step("worktrees"):
        inc_tree = trees.enter_context(rnd.lineage.worktree(head))
        cand_tree = trees.enter_context(rnd.lineage.worktree(head, patch))
    pause_point("candidate-tree")
    with rnd.times.step("audit"):
        audited = audit(
            rnd,
            rnd.round,
            rnd.tmp,
            (inc_tree, cand_tree),
            patch,
            touched,
            declared,
            request.bucket,
        )
    return {"incumbent": inc_tree, "candidate": cand_tree}, audited


def _closed_failure(
    rnd: RoundPlan,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    best: RoundResult,
    why: str,
    facts: KernelFacts | None,
    restores: bool,
) -> RoundResult:
    """A round that failed to measure, closed FAILED with both roles' kernel facts (what
    the candidate compiled to: a reader sees why without re-running it)."""
    failed = failed_result(rnd, request, patch, touched, started, best, why)
    attach_facts(rnd, failed, facts)
    failed.reasons.extend(_checkout_after(rnd, request, patch, touched, restores))
    close_round(rnd.campaign, failed, progress=rnd.step, times=rnd.times)
    return failed


def _refuse_incorrect(
    rnd: RoundPlan,
    request: Request,
    patch: str,
    gate: GateResult,
    notes: Sequence[str],
    facts: KernelFacts | None = None,
) -> None:
    """Rule 6: a candidate vetoed only by its failed focused test is a failed attempt of
    this round, not a round (``runner.flow.attempts``); ``notes``: the scope notes;
    ``facts``: both roles' kernel facts, kept with the attempt."""
    if not gate.decision.accepted and correctness_only(gate.reasons):
        why = [*gate.reasons, *notes]
        raise record_attempt(rnd.campaign, rnd.round, request.hypothesis, patch, why, facts)


def _checkout_after(
    rnd: RoundPlan, request: Request, patch: str, touched: list[str], restores: bool
) -> list[str]:
    """After a rollback or failure: the checkout back to the lineage head, the edit
    kept (``runner.flow.checkout``); the lines for the round's reasons."""
    if restores:
        return [restore_checkout(rnd.campaign, rnd.lineage, rnd.round, patch, touched)]
    return [kept_note(rnd.round)] if request.patch is None else []


def _open_round(
    rnd: RoundPlan, request: Request, patch: str, diffs: Sequence[FingerprintDiff]
) -> RoundResult:
    """The round's folder with its patch (``candidate.open_round_dir``), and a recorded
    override of a blocking environment difference; returns the current best."""
    campaign = rnd.campaign
    open_round_dir(campaign, rnd.round, patch)
    rnd.step("candidate tree")  # recorded in the round's folder, once it is clean
    best = current_best(campaign)
    blocking = [d for d in diffs if d.perf_relevant]
    if request.allow_env_mismatch and blocking:
        record_override(campaign, rnd.round, request.allow_env_mismatch, blocking, best.round)
    return best


def _guarded(
    rnd: RoundPlan,
    request: Request,
    roles: dict[str, Path],
    touched: list[str],
    shapes: list[Shape],
    audited: Audited,
    facts: FactsJob,
) -> tuple[GateResult, Score, Score, tuple[BuiltRole, ...]]:
    """Build both roles, each tree read-only to the other's builds and jobs, then
    measure and judge under the proof that each role ran its own files
    (``runner.round.build``, ``runner.round.tamper_check.proof``), upstream's quick
    script on the candidate beside the workers' start-up where the campaign has one
    (``runner.round.upstream_quick``: its failure fails the round); the roles' kernel
    facts compile beside it (``facts``, ``runner.round.kernel_facts``,
    docs/analysis.md), waited for while the trees exist, also when the measurement
    failed: a FAILED round records them too."""
    inc_tree, cand_tree = roles["incumbent"], roles["candidate"]
    try:
        facts.refuse_over_lds()  # AMD: a kernel over the LDS limit may read garbage
        with (
            built_roles(rnd, roles, touched) as built,
            proof(rnd, roles) as proven,
            _quick_check(built.plan, cand_tree) as quick,
        ):
            plan = built.plan  # every job from here on runs on its role's build
            gate, inc_score, cand_score = _measure_and_judge(
                plan, request, inc_tree, cand_tree, shapes, audited, proven + quick
            )
    except (MeasurementFailed, Tampered):  # a FAILED round: not an interrupt, which is quick
        facts.result()
        raise
    with rnd.times.step("wait for the kernel facts"):
        facts.result()
    return gate, inc_score, cand_score, built.roles


@contextlib.contextmanager
def _quick_check(rnd: RoundPlan, tree: Path) -> Iterator[BesideWork]:
    """Upstream's quick script on the candidate ``tree`` (``QuickCheck``), where the
    campaign has one: yields what the measurement owes it; its failure is raised
    before anything is measured where it ran at once, else by the first timed turn,
    and at the end where nothing was measured (a vetoed round)."""
    if not has_upstream_quick(rnd):  # upstream's own check beside the gate's evidence
        yield NOTHING_BESIDE
        return
    with QuickCheck(rnd, tree) as quick:
        if not quick.beside:
            quick.wait()
        yield quick.beside_work
        quick.wait()


def _measure_and_judge(
    rnd: RoundPlan,
    request: Request,
    inc_tree: Path,
    cand_tree: Path,
    shapes: list[Shape],
    audited: Audited,
    proven: BesideWork,
) -> tuple[GateResult, Score, Score]:
    """The candidate's focused test (beside the workers' start-up where it can be; its
    judge files as ``audited`` expects them), then the paired measurement and its
    judgement with the audit's vetoes, and a full-level confirmation where one is due
    (the audit's risks may make it due); ``proven``: the tamper check's proof, before
    every first timed turn."""
    m = rnd.manifest
    vetoes = audited.vetoes
    failed = f"focused test failed on the candidate ({m.test_command}):\n"
    samples = block_pairs(request.pairs or m.pairs)
    trees = {"incumbent": inc_tree, "candidate": cand_tree}
    how = Comparison(targeted=request.targeted)
    with FocusedTest(rnd, "candidate", cand_tree, audited.expect) as test:
        if (vetoes or test.done) and not test.wait():  # a vetoed round still records it
            vetoes.append(failed + test.tail)
        if vetoes:
            return veto_only(rnd, vetoes, shapes)
        try:
            beside = proven + test.beside_work
            got = measure_and_judge(
                rnd, trees, shapes, samples, vetoes=vetoes, how=how, beside=beside
            )
        except FocusedTestFailed as exc:  # it ran beside the workers' start-up
            return veto_only(rnd, [*vetoes, failed + exc.tail], shapes)
    if not got.gate.decision.accepted or request.targeted:
        return got.gate, got.reference, got.candidate
    return _confirmed(rnd, request, got, trees, shapes, proven, audited.risks)


def _confirmed(
    rnd: RoundPlan,
    request: Request,
    got: Judged,
    trees: dict[str, Path],
    shapes: list[Shape],
    proven: BesideWork,
    risks: Sequence[str],
) -> tuple[GateResult, Score, Score]:
    """An ACCEPTED quick reading, confirmed at the full level where that is due
    (``confirmation_due``) and asked for; else the reading with why not noted."""
    m = rnd.manifest
    samples = block_pairs(request.pairs or m.pairs)
    how = Comparison(targeted=request.targeted)
    full = level_shapes(m, "full")
    due = confirmation_due(
        request.level,
        got.gate.delta_pct,
        risks,
        [s.label for s in shapes],
        [s.label for s in full],
    )
    if not due.why:
        return got.gate, got.reference, got.candidate
    if not due.adds_shapes:
        why = (
            f"full-level confirmation not needed ({due.summary()}): the quick level "
            "measured every target shape"
        )
        return _noted(got.gate, why, last=True), got.reference, got.candidate
    if not request.confirm:
        why = f"full-level confirmation skipped (--no-confirm) although due: {due.summary()}"
        return _noted(got.gate, why, last=True), got.reference, got.candidate
    rnd.step("full-level confirmation")
    quick = (
        f"quick level {fmt_gain(got.gate.delta_pct, got.gate)} on "
        f"{len(shapes)} shape(s), ACCEPTED; upgraded to the full level "
        f"({len(full)} target shapes) for confirmation: {due.summary()}"
    )
    with rnd.times.step("full-level confirmation"):
        full_rnd = replace(rnd, level="full")
        confirmed = measure_and_judge(full_rnd, trees, full, samples, how=how, beside=proven)
    verdict = "confirmed" if confirmed.gate.decision.accepted else "NOT confirmed"
    return _noted(confirmed.gate, f"{quick}: {verdict}"), confirmed.reference, confirmed.candidate


def _noted(gate: GateResult, reason: str, *, last: bool = False) -> GateResult:
    """``gate`` with ``reason`` first among its reasons (the verdict's own first where
    ``last``: a note that changes nothing)."""
    reasons = (*gate.reasons, reason) if last else (reason, *gate.reasons)
    return replace(gate, reasons=reasons)


__all__ = ["Request", "measure_roles", "validate_round"]
