"""Tournament rounds: several hypotheses judged against one incumbent in one paired
measurement (docs/protocol.md §1.5).

``campaign validate --round N --hypothesis H1 --patch P1 --hypothesis H2 --patch P2``:
entry k is round N+k-1, with its own candidate worktree, audit, focused test, records
and summary, exactly as a single round.  One measurement serves them all: the
incumbent's workers and one worker per candidate and pair take turns in the palindrome
order (A B C C B A; ``runner.measure.paired``), every candidate in its own process and
tree, every tree read-only to every other role.  Each candidate is gated against the
incumbent as a single round is (``runner.compare.entries``); of the accepted
ones the best is confirmed by a fresh paired measurement against the incumbent before
it is committed, so that picking the largest of several noisy readings does not
inflate it; the others roll back as superseded, listed for a retry on the new head.
An entry that does not apply, fails its focused test, is vetoed by the audit or
crashes its workers fails alone; the others go on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path

from runner.compare.entries import Entry, confirm, measure_entries
from runner.compare.shapes import level_shapes
from runner.core.errors import (
    ConfigError,
    MeasurementFailed,
    NothingToDo,
    RepeatedHypothesis,
    RoundOutOfOrder,
    Tampered,
)
from runner.core.limits import MAX_TOURNAMENT_ENTRIES
from runner.core.outcomes import Decision, GateResult, RoundResult, TournamentNote
from runner.core.pause_points import pause_point
from runner.core.step_times import StepTime, StepTimes
from runner.executors.base import BuiltRole, Executor
from runner.flow.tournament_tests import EntryTests, quick_checks
from runner.judge.resubmission import names_in
from runner.measure.beside import BesideWork
from runner.render.figures import fmt_gain
from runner.round.build import Built, built_roles, describe
from runner.round.candidate import advance, audit, closed_transfer, lineage_commit, open_round_dir
from runner.round.context import Progress, RoundPlan, open_round
from runner.round.judge_files import check_scope
from runner.round.kernel_facts import FactsJob
from runner.round.logs import close_round
from runner.round.result import (
    Request,
    attach_facts,
    check_new,
    check_round_number,
    current_best,
    failed_result,
    now,
    round_result,
    veto_only,
)
from runner.round.tamper_check import TreeState, prove_ready, tampered
from runner.round.tamper_check import snapshot as snapshot_trees
from runner.store.campaign import Campaign
from runner.store.fingerprint_check import check_round_comparable, record_override
from runner.store.guard import locked
from runner.store.lineage import Lineage, snapshot
from runner.store.manifest import branch_name
from runner.targets.registry import manifest_target

MAX_ENTRIES = MAX_TOURNAMENT_ENTRIES  # hypotheses of one tournament, at most


def validate_tournament(
    campaign: Campaign,
    executor: Executor,
    requests: Sequence[Request],
    *,
    progress: Progress = print,
) -> list[RoundResult]:
    """Rounds N.. of ``requests`` (one per entry, numbered in order) judged in one
    measurement; returns their results in round order.  Bad requests, and a tournament
    none of whose entries can be measured, are refused before anything is written."""
    times = StepTimes()  # from the start: the checks below are the round's time too
    with locked(campaign, progress):
        _check_requests(campaign, requests)
        m = campaign.manifest
        lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
        _check_new(campaign, lineage, requests)
        target = manifest_target(m)
        entries = [Entry(request, k) for k, request in enumerate(requests, start=1)]
        for entry in entries:
            try:
                entry.touched = lineage.check_patch(entry.patch)
                entry.declared = check_scope(m, target, entry.touched, entry.request.allow_outside)
            except (ConfigError, NothingToDo) as exc:
                entry.failure = f"refused before measuring: {exc}"
        if all(e.failure for e in entries):
            lines = "\n".join(f"  round-{e.n}: {e.failure}" for e in entries)
            raise ConfigError(f"no entry of the tournament can be measured:\n{lines}")
        first = requests[0]
        best = current_best(campaign)
        diffs = check_round_comparable(campaign, best.round, first.allow_env_mismatch)
        blocking = [d for d in diffs if d.perf_relevant]
        started = now()
        times.add(StepTime("checks before the round", 0.0, times.now()))
        with open_round(
            campaign, executor, progress, first.round, first.level, first.gpus, times=times
        ) as rnd:
            for entry in entries:
                _open_round(rnd, entry)
                if first.allow_env_mismatch and blocking:
                    record_override(
                        campaign, entry.n, first.allow_env_mismatch, blocking, best.round
                    )
            return _run(rnd, entries, started)


def _check_requests(campaign: Campaign, requests: Sequence[Request]) -> None:
    if len(requests) < 2:
        raise ConfigError("a tournament judges two or more hypotheses: give each its --patch")
    if len(requests) > MAX_ENTRIES:
        raise ConfigError(
            f"{len(requests)} entries; a tournament takes at most {MAX_ENTRIES}: split them"
        )
    _check_distinct(requests)
    check_round_number(campaign, requests[0].round)
    for k, request in enumerate(requests):
        if request.round != requests[0].round + k:
            raise RoundOutOfOrder("a tournament's entries are consecutive rounds N, N+1, ...")
        if not request.hypothesis.strip():
            raise ConfigError(
                f"entry {k + 1} (round {request.round}) states no hypothesis: give every "
                "--patch its --hypothesis, or make the patch with `git format-patch` so its "
                "subject is the hypothesis"
            )
        if request.patch is None:
            raise ConfigError("every tournament entry needs its --patch FILE")


def _check_new(campaign: Campaign, lineage: Lineage, requests: Sequence[Request]) -> None:
    """Rule 7 for every entry, as for a single round (``check_new``): an entry that
    repeats a judged round's hypothesis or patch, or runs a rolled-back round's code
    again, refuses the whole tournament before anything is written, naming the entry."""
    for request in requests:
        try:
            check_new(
                campaign,
                request.hypothesis,
                request.patch or "",
                lambda p: names_in(lineage.text_at_head(p)),
            )
        except RepeatedHypothesis as exc:
            raise RepeatedHypothesis(
                f"tournament entry round-{request.round}: {exc}",
                earlier=exc.earlier,
                same=exc.same,
            ) from None


def _check_distinct(requests: Sequence[Request]) -> None:
    """Refuse the same change entered twice (its diff, whatever the mail header above
    it): both would be measured, and one would be judged against its own copy."""
    first: dict[str, int] = {}
    for request in requests:
        text = request.patch or ""
        start = text.find("diff --git")
        body = text[start:] if start >= 0 else text
        if not body.strip():
            continue  # an empty patch is refused as such, later
        if body in first:
            raise RepeatedHypothesis(
                f"rounds {first[body]} and {request.round} are the same patch: a tournament "
                "judges different changes; give each --patch once",
                earlier=None,
                same="bytes",
            )
        first[body] = request.round


def _open_round(rnd: RoundPlan, entry: Entry) -> None:
    open_round_dir(rnd.campaign, entry.n, entry.patch)
    entry.dir = rnd.tmp / f"round-{entry.n}"
    entry.dir.mkdir()
    entry.view = RoundPlan(  # what its records are judged and written from; it runs no job
        rnd.campaign,
        rnd.executor,
        rnd.progress,
        entry.dir,
        entry.n,
        rnd.level,
        rnd.gpus,
        times=rnd.times,
    )


def _run(rnd: RoundPlan, entries: list[Entry], started: str) -> list[RoundResult]:
    m = rnd.manifest
    lineage = rnd.lineage
    head = lineage.head()
    shapes = level_shapes(m, rnd.level, rnd.round)
    live = [e for e in entries if not e.failure]
    failed_all: str | None = None
    with contextlib.ExitStack() as stack:
        inc_tree = stack.enter_context(lineage.worktree(head))
        for entry in live:
            entry.tree = stack.enter_context(lineage.worktree(head, entry.patch))
        pause_point("candidate-tree")
        with rnd.times.step("audit"):
            for entry in entries:
                _audit(rnd, entry, inc_tree)
        roles = {"incumbent": inc_tree, **{e.role: e.tree for e in live if e.tree}}
        guarded = tuple(roles)  # no role may write any other's tree
        builds: tuple[BuiltRole, ...] = ()
        facts_job = FactsJob(rnd, roles)  # beside the measurement (docs/analysis.md)
        try:
            built = _build(rnd, stack, roles, live)
            builds, plan = built.roles, built.plan  # its jobs run on their roles' builds
            with rnd.times.step("tamper check: trees before"):
                before = snapshot_trees(roles)
            proven = BesideWork(ready_checks=(partial(prove_ready, before, guarded),))
            try:
                quick_checks(plan, live)
                with contextlib.closing(EntryTests(plan, live)) as tests:
                    measure_entries(plan, inc_tree, live, shapes, proven + tests.beside_work)
                with rnd.times.step("confirmation"):
                    confirm(plan, inc_tree, live, shapes, proven)
            except MeasurementFailed as exc:
                cause = _tampered(rnd, entries, before, guarded)
                raise (cause or exc) from exc
            with rnd.times.step("tamper check: trees and loaded files after"):
                cause = _tampered(rnd, entries, before, guarded)
            if cause is not None:
                raise cause
        except (MeasurementFailed, Tampered) as exc:
            failed_all = str(exc)
        with rnd.times.step("wait for the kernel facts"):
            facts = facts_job.result()
        for entry in live:
            entry.facts = facts.for_role(entry.role)
    if builds:
        for entry in live:
            entry.notes.append(describe(builds))
    return _close(rnd, entries, started, head, failed_all)


def _build(
    rnd: RoundPlan,
    stack: contextlib.ExitStack[bool | None],
    roles: dict[str, Path],
    live: Sequence[Entry],
) -> Built:
    """Every role's build, held until the tournament ends (``built_roles``); a
    candidate whose build fails fails alone (its role dropped, the rest built again:
    cache hits), the incumbent's fails the tournament."""
    while True:
        try:
            return stack.enter_context(built_roles(rnd, roles))
        except MeasurementFailed as exc:
            folder = exc.log_path.parent.name if exc.log_path is not None else ""
            culprit = next((e for e in live if folder == f"build-{e.role}"), None)
            if culprit is None:
                raise
            culprit.failure = f"its native build failed: {exc}"
            del roles[culprit.role]


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
    entry.notes, entry.expect = audited.notes, audited.expect


def _tampered(
    rnd: RoundPlan,
    entries: Sequence[Entry],
    before: Mapping[str, TreeState],
    guarded: tuple[str, ...],
) -> Tampered | None:
    """``tamper_check.tampered`` over the tournament's workers, then each
    confirmation's (whose candidate workers have the role ``candidate``)."""
    found = tampered(before, rnd.tmp, guarded)
    for entry in entries:
        if found is None and entry.confirmed is not None:
            found = tampered({**before, "candidate": before[entry.role]}, entry.dir, guarded)
    return found


# ---- closing -------------------------------------------------------------------------
def _close(
    rnd: RoundPlan, entries: list[Entry], started: str, head: str, failed_all: str | None
) -> list[RoundResult]:
    """Every entry's records in round order, then, for the winner, the lineage commit
    (made before the records, the ref moved after them, as a single round does)."""
    campaign = rnd.campaign
    winner = None if failed_all else next((e for e in entries if e.won), None)
    note = _note(entries, winner, failed_all)
    commit = None
    if winner is not None:
        assert winner.gate is not None
        hypothesis = winner.request.hypothesis
        with rnd.times.step("lineage commit"):
            commit = lineage_commit(rnd, winner.n, hypothesis, winner.gate, head, winner.patch)
    best = current_best(campaign)
    results = []
    for entry in entries:
        view = entry.view
        assert view is not None
        why = failed_all or entry.failure
        if why:
            result = failed_result(
                view,
                entry.request,
                entry.patch,
                entry.touched,
                started,
                best,
                "\n".join([why, *entry.notes]),
            )
        else:
            span = f"{entries[0].n}-{entries[-1].n}"
            result = _judged_result(view, entry, started, best, winner, commit, span)
        result.tournament = note
        close_round(campaign, result, progress=view.step, times=rnd.times)
        results.append(result)
    if commit is not None:
        advance(rnd, commit, head)
    return results


def _judged_result(
    view: RoundPlan,
    entry: Entry,
    started: str,
    best: RoundResult,
    winner: Entry | None,
    commit: str | None,
    span: str,
) -> RoundResult:
    if entry.judged is None:  # vetoed (audit or focused test) before it was measured
        gate, inc, cand = veto_only(
            view, entry.vetoes, level_shapes(view.manifest, view.level, view.round)
        )
    else:
        gate, inc, cand = entry.judged.gate, entry.judged.reference, entry.judged.candidate
    if winner is not None and entry is not winner and gate.decision.accepted:
        gate = _superseded(gate, entry, winner)
    won = entry is winner
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
    result.reasons.extend(entry.notes)
    attach_facts(view, result, entry.facts)
    result.attribution += (
        f"; judged in a tournament: one incumbent beside every candidate of rounds "
        f"{span}, each candidate in its own workers and tree"
    )
    if entry.transfer is not None:
        result.transfer = closed_transfer(view, entry.transfer, entry.rejects, gate)
    return result


def _superseded(gate: GateResult, entry: Entry, winner: Entry) -> GateResult:
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


__all__ = ["MAX_ENTRIES", "validate_tournament"]
