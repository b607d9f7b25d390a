"""VALIDATE: one or more hypotheses, each its own round, judged against the lineage head
in one paired measurement (the baseline, round-1, is ``runner.flow.baseline``; two or
more are a tournament, docs/protocol.md §1.5).

Flow: refuse bad requests before writing anything (``runner.flow.validate_checks``) ->
each entry's round folder with its change -> fresh worktrees of the incumbent (the
lineage head) and of each entry (head + patch; its focused test files the head's:
``runner.round.judge_files``) -> each entry's audit -> every role's build, each tree
read-only to the others' builds and jobs -> upstream's quick script and the focused
tests, beside the workers' start-up where they can be (``runner.flow.entry_tests``) ->
one interleaved measurement of the incumbent beside every candidate, more pairs while
the gate asks (``runner.compare.entries``), under the proof that each role ran its own
files -> a confirmation: an entry alone at the full level where that is due; with two
or more, the best accepted one by a fresh paired measurement against the incumbent, so
that picking the largest of several noisy readings does not inflate it (the others
roll back as superseded, listed for a retry on the new head) -> every entry's records
in round order (summary, both logs, result.json last) -> on ACCEPTED the lineage
commit and ref update, after the records; a single round from the user's checkout that
rolls back or fails puts the checkout back to the lineage head, the edit kept
(``runner.flow.checkout``), before the records.

An entry that does not apply, fails upstream's quick check or its focused test, is
vetoed by the audit or crashes its workers fails alone; the others go on.  A single
round vetoed only by its failed focused test is a failed attempt, not a round (Rule 6,
``runner.flow.attempts``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from runner.compare.entries import Entry, confirm, confirm_alone, entry_alone, measure_entries
from runner.compare.shapes import level_shapes
from runner.core.errors import MeasurementFailed, Tampered
from runner.core.outcomes import Decision, GateResult, RoundResult, TournamentNote
from runner.core.pause_points import pause_point
from runner.core.shapes import Shape
from runner.core.step_times import StepTime, StepTimes
from runner.executors.base import BuiltRole, Executor
from runner.flow.attempts import correctness_only, record_attempt
from runner.flow.checkout import kept_note, restore_checkout
from runner.flow.entry_tests import EntryTests, upstream_checks
from runner.flow.validate_checks import MAX_ENTRIES, Checked, check_requests
from runner.judge.false_accept import against_what_is_left
from runner.render.figures import fmt_gain
from runner.round.build import Built, built_roles, describe
from runner.round.candidate import advance, audit, closed_transfer, lineage_commit, open_round_dir
from runner.round.context import Progress, RoundPlan, open_round
from runner.round.kernel_facts import FactsJob
from runner.round.logs import close_round
from runner.round.result import Request, attach_facts, failed_result, now, round_result, veto_only
from runner.round.tamper_check import proof
from runner.store.campaign import Campaign
from runner.store.fingerprint_check import record_override
from runner.store.guard import locked
from runner.store.lineage import snapshot
from runner.store.roundfiles import write_diagnosis


def validate_round(
    campaign: Campaign, executor: Executor, request: Request, *, progress: Progress = print
) -> RoundResult:
    """One VALIDATE round: ``validate`` of one request."""
    return validate(campaign, executor, [request], progress=progress)[0]


def validate(
    campaign: Campaign,
    executor: Executor,
    requests: Sequence[Request],
    *,
    progress: Progress = print,
) -> list[RoundResult]:
    """Rounds N.. of ``requests`` (one per entry, numbered in order) judged in one
    measurement; their results in round order.  Bad requests, and a tournament none of
    whose entries can be measured, are refused before anything is written."""
    times = StepTimes()  # from the start: the checks below are the round's time too
    with locked(campaign, progress):
        checked = check_requests(campaign, requests)
        started = now()
        first = requests[0]
        if checked.diagnosed is not None:
            write_diagnosis(campaign, checked.diagnosed, first.round, dict(first.diagnosis))
        times.add(StepTime("checks before the round", 0.0, times.now()))
        with open_round(
            campaign, executor, progress, first.round, first.level, first.gpus, times=times
        ) as rnd:
            _open_entries(rnd, checked)
            return _run(rnd, checked, started)


def _open_entries(rnd: RoundPlan, checked: Checked) -> None:
    """Each entry's round folder with its change (``candidate.open_round_dir``), its
    records' scratch folder and view (the round's own for an entry alone), and a
    recorded override of a blocking environment difference."""
    campaign = rnd.campaign
    override = checked.entries[0].request.allow_env_mismatch
    for entry in checked.entries:
        open_round_dir(campaign, entry.n, entry.patch)
        if entry.alone:
            entry.dir, entry.view = rnd.tmp, rnd
        else:
            entry.dir = rnd.tmp / f"round-{entry.n}"
            entry.dir.mkdir()
            entry.view = RoundPlan(  # what its records are judged and written from; no job
                campaign,
                rnd.executor,
                rnd.progress,
                entry.dir,
                entry.n,
                rnd.level,
                rnd.gpus,
                times=rnd.times,
            )
        if override and checked.blocking:
            record_override(campaign, entry.n, override, checked.blocking, checked.best.round)
    rnd.step("candidate tree")  # recorded in the round's folder, once it is clean


def _run(rnd: RoundPlan, checked: Checked, started: str) -> list[RoundResult]:
    """Trees, audits, builds, the checks and the measurement; then the records."""
    entries = checked.entries
    head = rnd.lineage.head()
    shapes = level_shapes(rnd.manifest, rnd.level, rnd.round)
    live = [e for e in entries if not e.failure]
    failed_all: str | None = None
    builds: tuple[BuiltRole, ...] = ()
    with contextlib.ExitStack() as stack:
        with rnd.times.step("worktrees"):
            inc_tree = stack.enter_context(rnd.lineage.worktree(head))
            for entry in live:
                entry.tree = stack.enter_context(rnd.lineage.worktree(head, entry.patch))
        pause_point("candidate-tree")
        with rnd.times.step("audit"):
            for entry in entries:
                _audit(rnd, entry, inc_tree)
        roles = {"incumbent": inc_tree, **{e.role: e.tree for e in live if e.tree}}
        facts = FactsJob(rnd, roles)  # beside the measurement (docs/analysis.md)
        try:
            facts.refuse_over_lds()  # AMD: a kernel over the LDS limit may read garbage
            built = _build(rnd, stack, roles, live)
            builds = built.roles
            _measure(built.plan, roles, live, shapes)  # its jobs run on their roles' builds
        except (MeasurementFailed, Tampered) as exc:
            failed_all = str(exc)
        with rnd.times.step("wait for the kernel facts"):
            recorded = facts.result()  # a failed round records them too
        for entry in live:
            entry.facts = recorded if entry.alone else recorded.for_role(entry.role)
    return _close(rnd, checked, started, head, failed_all, builds)


def _audit(rnd: RoundPlan, entry: Entry, inc_tree: Path) -> None:
    """Snapshot the entry's kernel, audit its change (vetoes), restore the head's
    focused test files in its tree; an entry refused before measuring snapshots the
    head's kernel (every round is snapshotted, measured or not)."""
    if entry.tree is None:
        snapshot(inc_tree, list(rnd.manifest.kernel_source), rnd.campaign.snapshot_dir(entry.n))
        return
    audited = audit(
        rnd,
        entry.n,
        entry.dir,
        (inc_tree, entry.tree),
        entry.patch,
        entry.touched,
        entry.declared,
        entry.request.bucket,
    )
    entry.vetoes, entry.transfer, entry.rejects = audited.vetoes, audited.transfer, audited.rejects
    entry.notes, entry.expect, entry.risks = audited.notes, audited.expect, audited.risks


def _build(
    rnd: RoundPlan,
    stack: contextlib.ExitStack[bool | None],
    roles: dict[str, Path],
    live: Sequence[Entry],
) -> Built:
    """Every role's build, held until the round ends (``built_roles``); of several
    candidates one whose build fails fails alone (its role dropped, the rest built
    again: cache hits); the incumbent's, or an entry's alone, fails the round."""
    alone = entry_alone(live)
    changed = alone.touched if alone is not None else None  # named in the build reason
    while True:
        try:
            return stack.enter_context(built_roles(rnd, roles, changed))
        except MeasurementFailed as exc:
            folder = exc.log_path.parent.name if exc.log_path is not None else ""
            culprit = next((e for e in live if folder == f"build-{e.role}"), None)
            if culprit is None or culprit.alone:
                raise
            culprit.failure = f"its native build failed: {exc}"
            del roles[culprit.role]


def _measure(
    rnd: RoundPlan, roles: dict[str, Path], live: Sequence[Entry], shapes: list[Shape]
) -> None:
    """Under the proof that each role ran its own files (``tamper_check.proof``, also
    over a winner's fresh confirmation): upstream's quick checks and the focused tests
    (``runner.flow.entry_tests``), the one measurement of every entry, then its
    confirmation: an entry alone at the full level where that is due, of several the
    best accepted one afresh."""
    inc_tree = roles["incumbent"]

    def confirmed() -> list[tuple[Path, str]]:
        return [(e.dir, e.role) for e in live if e.confirmed is not None]

    with proof(rnd, roles, confirmed) as proven, upstream_checks(rnd, live) as quick:
        with contextlib.closing(EntryTests(rnd, live)) as tests:
            beside = proven + quick + tests.beside_work
            measure_entries(rnd, inc_tree, live, shapes, beside)
        alone = entry_alone(live)
        if alone is not None:
            confirm_alone(rnd, inc_tree, alone, shapes, proven + quick)
        else:
            with rnd.times.step("confirmation"):
                confirm(rnd, inc_tree, live, shapes, proven)


# ---- closing -------------------------------------------------------------------------
def _close(
    rnd: RoundPlan,
    checked: Checked,
    started: str,
    head: str,
    failed_all: str | None,
    builds: tuple[BuiltRole, ...],
) -> list[RoundResult]:
    """Every entry's records in round order, then, for the winner, the lineage commit
    (made before the records, the ref moved after them)."""
    entries = checked.entries
    if failed_all is None:
        for entry in entries:
            _settle(rnd, entry)
    winner = None if failed_all else next((e for e in entries if e.won), None)
    commit = None
    if winner is not None:
        gate, hypothesis = winner.gate, winner.request.hypothesis
        assert gate is not None
        with rnd.times.step("lineage commit"):
            commit = lineage_commit(rnd, winner.n, hypothesis, gate, head, winner.patch)
    note = _note(entries, winner, failed_all) if checked.several else None
    results = []
    for entry in entries:
        why = failed_all or entry.failure
        if why:
            result = _failed(entry, started, checked.best, why)
        else:
            result = _judged_result(entry, started, checked.best, winner, commit, builds)
        if note is not None:
            result.tournament = note
            if not why:
                result.attribution += (
                    f"; judged in a tournament: one incumbent beside every candidate of "
                    f"rounds {note.first}-{note.last}, each candidate in its own workers and tree"
                )
        if entry.alone and entry is not winner:
            with rnd.times.step("checkout"):
                result.reasons.extend(_checkout_after(rnd, entry, checked.restores))
        assert entry.view is not None
        close_round(rnd.campaign, result, progress=entry.view.step, times=rnd.times)
        results.append(result)
    if commit is not None:
        advance(rnd, commit, head)
    return results


def _settle(rnd: RoundPlan, entry: Entry) -> None:
    """An entry's verdict as its round records it: an unmeasured one vetoed (its audit,
    its focused test); Rule 6 for an entry alone (raises the recorded attempt); a
    resubmission judged against what is left of the false-accept budget; an entry
    alone wins when accepted (of several, the confirmation picked the winner)."""
    if entry.failure:
        return
    assert entry.view is not None
    if entry.judged is None:
        shapes = level_shapes(entry.view.manifest, entry.view.level, entry.view.round)
        entry.unmeasured = veto_only(entry.view, entry.vetoes, shapes)
    gate = entry.verdict[0]
    if entry.alone and not gate.decision.accepted and correctness_only(gate.reasons):
        why = [*gate.reasons, *entry.notes]
        raise record_attempt(
            rnd.campaign, entry.n, entry.request.hypothesis, entry.patch, why, entry.facts
        )
    if entry.again is not None and entry.judged is not None:
        budget = against_what_is_left(entry.judged.gate, entry.again, rnd.campaign.results())
        entry.judged = replace(entry.judged, gate=budget)
    if entry.alone:
        entry.won = entry.verdict[0].decision.accepted


def _failed(entry: Entry, started: str, best: RoundResult, why: str) -> RoundResult:
    """A FAILED entry's record with both roles' kernel facts (what the candidate
    compiled to: a reader sees why without re-running it)."""
    view = entry.view
    assert view is not None
    why = "\n".join([why, *entry.notes])
    result = failed_result(view, entry.request, entry.patch, entry.touched, started, best, why)
    attach_facts(view, result, entry.facts)
    return result


def _judged_result(
    entry: Entry,
    started: str,
    best: RoundResult,
    winner: Entry | None,
    commit: str | None,
    builds: tuple[BuiltRole, ...],
) -> RoundResult:
    view = entry.view
    assert view is not None
    gate, inc, cand = entry.verdict
    if winner is not None and entry is not winner and gate.decision.accepted:
        gate = _superseded(gate, winner)
    won = entry is winner
    with view.times.step("round result"):
        result = round_result(
            view,
            entry.request,
            entry.patch,
            entry.touched,
            started,
            gate,
            cand,
            inc,
            best,
            commit if won else None,
        )
    if builds:
        result.reasons.append(describe(builds))
    result.reasons.extend(entry.notes)
    attach_facts(view, result, entry.facts)
    if entry.transfer is not None:
        with view.times.step("transfer check"):
            result.transfer = closed_transfer(view, entry.transfer, entry.rejects, gate)
    return result


def _checkout_after(rnd: RoundPlan, entry: Entry, restores: bool) -> list[str]:
    """After a single round's rollback or failure: the checkout back to the lineage
    head, the edit kept (``runner.flow.checkout``); the lines for its reasons."""
    if restores:
        return [restore_checkout(rnd.campaign, rnd.lineage, entry.n, entry.patch, entry.touched)]
    return [kept_note(entry.n)] if entry.from_checkout else []


def _superseded(gate: GateResult, winner: Entry) -> GateResult:
    assert winner.gate is not None
    why = (
        f"superseded by round-{winner.n} ({fmt_gain(winner.gate.delta_pct, winner.gate)} "
        f"against {fmt_gain(gate.delta_pct, gate)}): accepted against the same incumbent, "
        f"but round-{winner.n} gained more; retry it on the new head"
    )
    return replace(gate, decision=Decision.ROLLED_BACK, reasons=(*gate.reasons, why))


def _note(entries: Sequence[Entry], winner: Entry | None, failed_all: str | None) -> TournamentNote:
    """The one line the status, the report and every entry's summary show."""
    first, last = entries[0].n, entries[-1].n
    if failed_all:
        line = f"tournament rounds {first}-{last}: FAILED ({failed_all.splitlines()[0]})"
    elif winner is None:
        line = f"tournament rounds {first}-{last}: no entry accepted; the lineage is unchanged"
    else:
        assert winner.gate is not None and winner.reading is not None
        line = (
            f"tournament rounds {first}-{last}: round-{winner.n} won: "
            f"{fmt_gain(winner.reading.delta_pct, winner.reading)} in the tournament, "
            f"confirmed at {fmt_gain(winner.gate.delta_pct, winner.gate)} by a fresh paired "
            "measurement against the incumbent"
        )
    retry = [] if winner is None else [e.n for e in entries if e is not winner and _retry(e)]
    return TournamentNote(
        first=first, last=last, winner=None if winner is None else winner.n, line=line, retry=retry
    )


def _retry(entry: Entry) -> bool:
    """Whether an entry that lost is listed for a retry on the new head: it was accepted
    against the same incumbent, or measured no longer once the winner's reading was
    out of its reach (``Entry.outpaced_by``)."""
    return entry.accepted_reading or entry.outpaced_by is not None


__all__ = ["MAX_ENTRIES", "Request", "validate", "validate_round"]
