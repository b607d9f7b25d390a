"""The comparison of a reference with one or more candidates (``runner.flow.validate``):
its entries, the one paired measurement of the incumbent beside every candidate, and,
with two or more, the fresh confirmation of the best accepted one. The entries' focused
tests, beside the first measurement's start-up, are the flow's
(``runner.flow.entry_tests``).

One entry alone is a single round: its comparison is ``runner.compare.loop``'s
``measure_and_judge`` (A B B A turns, more pairs while the gate asks). With several,
sequential as that loop: each candidate is judged against the incumbent on the pairs
measured so far; the ones the gate cannot tell yet get more fresh pairs, measured
together beside the incumbent (one incumbent worker per pair serves them all), until
every one is decided or the cap is reached. The cap is the level's, on each comparison's
share of the time: a measurement of r roles that took t seconds counts t * 2 / r for
each candidate in it (a two-role round's time for the same pairs), so each comparison
gets about the pairs a single round would, and one still unclear after the others are
decided goes on at a single round's pace. A candidate whose worker crashes fails alone:
the measurement starts again without it (the pairs completed before stay)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from runner.compare.loop import (
    Comparison,
    Judged,
    first_samples,
    judge,
    last_index,
    measure_and_judge,
    measure_roles,
    measurement_cap,
    next_pairs,
    with_looks,
)
from runner.compare.shapes import level_shapes
from runner.core.artifact_names import BUILDS
from runner.core.errors import FocusedTestFailed, MeasurementFailed
from runner.core.files import copy_plain_tree
from runner.core.isa_facts import KernelFacts
from runner.core.limits import block_pairs
from runner.core.outcomes import Decision, GateResult, Score, TransferCheck
from runner.core.shapes import Shape
from runner.executors.jit_cache import JitFolders
from runner.judge.confirmation import confirmation_due
from runner.judge.gate import confirms, outpaced, promising
from runner.measure.beside import BesideWork
from runner.render.figures import fmt_gain

if TYPE_CHECKING:  # compare sits below the round: a RoundPlan and a Request are handed in
    from runner.round.context import RoundPlan
    from runner.round.result import Request

ROLE_PREFIX = "candidate-"


@dataclass
class Entry:
    """One hypothesis of a validation: round ``request.round``, candidate role
    ``candidate-<position>`` (``candidate`` when it is ``alone``: a single round), and
    what happened to it."""

    request: Request
    position: int  # 1-based, the order given
    alone: bool = False  # the only entry: a single round, its records the round's own
    # its change came from the user's checkout (a single round without --patch)
    from_checkout: bool = False
    touched: list[str] = field(default_factory=list)
    declared: Sequence[str] = ()
    failure: str | None = None  # refused, or its worker crashed: the round is FAILED
    tree: Path | None = None
    vetoes: list[str] = field(default_factory=list)
    transfer: TransferCheck | None = None
    rejects: bool = False  # the audit rejects the change (no real gain to expect)
    risks: list[str] = field(default_factory=list)  # its audit's high-risk kinds
    notes: list[str] = field(default_factory=list)
    # what its judge files must hold when its focused test starts (its audit's)
    expect: dict[str, str] = field(default_factory=dict)
    dir: Path = Path()  # its records' scratch folder (the round's view of the measurement)
    view: RoundPlan | None = None
    reading: GateResult | None = None  # its verdict in the tournament
    judged: Judged | None = None  # what its round records (the confirmation's, if one ran)
    confirmed: Judged | None = None
    won: bool = False
    outpaced_by: int | None = None  # measured no longer: this round's reading was higher
    # the pair counts its tournament reading was judged at (``GateResult.looks``)
    looks: list[int] = field(default_factory=list)
    facts: KernelFacts | None = None  # its kernel facts against the incumbent's
    # the rolled-back round whose code it runs again (``--resubmit``), or None
    again: int | None = None
    # its verdict when it was never measured (vetoed): ``runner.round.result.veto_only``'s
    unmeasured: tuple[GateResult, Score, Score] | None = None

    @property
    def n(self) -> int:
        return self.request.round

    @property
    def patch(self) -> str:
        return self.request.patch or ""

    @property
    def role(self) -> str:
        return "candidate" if self.alone else f"{ROLE_PREFIX}{self.position}"

    @property
    def gate(self) -> GateResult | None:
        return self.judged.gate if self.judged is not None else None

    @property
    def verdict(self) -> tuple[GateResult, Score, Score]:
        """What its round records: the gate, the incumbent's and its own score."""
        if self.judged is not None:
            return self.judged.gate, self.judged.reference, self.judged.candidate
        assert self.unmeasured is not None, "an entry's verdict before it was judged"
        return self.unmeasured

    @property
    def accepted_reading(self) -> bool:
        return self.reading is not None and self.reading.decision.accepted


def entry_alone(entries: Sequence[Entry]) -> Entry | None:
    """The measurable entry of a single round (``Entry.alone``), or None: several
    entries, or the one refused before measuring."""
    live = [e for e in entries if not e.failure]
    return live[0] if len(live) == 1 and live[0].alone else None


def measure_entries(
    rnd: RoundPlan,
    inc_tree: Path,
    entries: Sequence[Entry],
    shapes: list[Shape],
    beside: BesideWork,
) -> None:
    """The one paired measurement of the incumbent beside every unvetoed entry, and
    each entry's verdict on it (``Entry.reading`` and ``Entry.judged``); ``beside``:
    the entries' tests and the tamper check's proof (``runner.measure.beside``)."""
    todo = [e for e in entries if e.tree is not None and not e.failure and not e.vetoes]
    if todo and todo[0].alone:
        _measure_alone(rnd, inc_tree, todo[0], shapes, beside)
    elif todo:
        _measure_several(rnd, inc_tree, entries, todo, shapes, beside)


def _measure_several(
    rnd: RoundPlan,
    inc_tree: Path,
    entries: Sequence[Entry],
    todo: list[Entry],
    shapes: list[Shape],
    beside: BesideWork,
) -> None:
    """The measurement of several entries (the module's), ``todo`` those measured."""
    request = todo[0].request
    samples = block_pairs(request.pairs or rnd.manifest.pairs)
    asked = first_samples(rnd, samples)
    paths: dict[str, dict[str, list[Path]]] = {e.role: {"incumbent": [], e.role: []} for e in todo}
    cap = measurement_cap(rnd.level)
    spent = {e.role: 0.0 for e in todo}  # each comparison's share of the time, in seconds
    while todo:
        trees = {"incumbent": inc_tree, **{e.role: e.tree for e in todo if e.tree}}
        start = time.monotonic()
        got = _measure(rnd, trees, shapes, asked, todo, beside)
        if got is None:
            continue
        share = (time.monotonic() - start) * 2 / len(trees)  # a two-role round's time
        for e in todo:
            paths[e.role]["incumbent"] += got["incumbent"]
            paths[e.role][e.role] += got[e.role]
            spent[e.role] += share
        undecided = []
        for e in todo:
            assert e.view is not None
            how = Comparison(roles=("incumbent", e.role))
            e.judged = judge(e.view, paths[e.role], how, e.vetoes)
            e.looks.append(e.judged.gate.pairs_used)
            if e.judged.gate.decision is Decision.NEEDS_REMEASURE:
                undecided.append(e)
        undecided = _stop_outpaced(entries, undecided, paths)
        if not undecided:
            break
        have = max(len(paths[e.role]["incumbent"]) for e in undecided)
        wanted = max(e.judged.gate.more_pairs for e in undecided if e.judged)
        hopeful = any(e.judged is not None and promising(e.judged.gate) for e in undecided)
        asked = next_pairs(wanted, have, max(spent[e.role] for e in undecided), cap, hopeful)
        todo = undecided
        if asked < 1:  # the cap: judge what is still unclear as final
            rnd.progress(f"round-{rnd.round}: tournament measurement cap reached at {have} pair(s)")
            _judge_final(todo, paths)
            break
        rnd.progress(
            f"round-{rnd.round}: {len(todo)} entr(ies) not clear yet: {asked} more pair(s)"
        )
    for e in entries:
        if e.judged is not None and e.role in paths:
            e.judged = with_looks(e.judged, e.looks)
            e.reading = e.judged.gate
            _keep_passes(rnd, e, paths[e.role])


def _measure_alone(
    rnd: RoundPlan, inc_tree: Path, entry: Entry, shapes: list[Shape], beside: BesideWork
) -> None:
    """A single round's comparison (``measure_and_judge``, judged on its targeted shapes
    where it names them); a focused test that failed beside the workers' start-up leaves
    the entry unmeasured, its veto on the entry (``runner.flow.entry_tests``)."""
    assert entry.tree is not None
    samples = block_pairs(entry.request.pairs or rnd.manifest.pairs)
    trees = {"incumbent": inc_tree, "candidate": entry.tree}
    how = Comparison(targeted=entry.request.targeted)
    try:
        entry.judged = measure_and_judge(
            rnd, trees, shapes, samples, vetoes=entry.vetoes, how=how, beside=beside
        )
    except FocusedTestFailed:
        return


def _judge_final(todo: Sequence[Entry], paths: dict[str, dict[str, list[Path]]]) -> None:
    """At the cap: each entry still unclear judged on its pairs as final."""
    for e in todo:
        assert e.view is not None
        how = Comparison(roles=("incumbent", e.role))
        e.judged = judge(e.view, paths[e.role], how, e.vetoes, final=True)


def _stop_outpaced(
    entries: Sequence[Entry], undecided: list[Entry], paths: dict[str, dict[str, list[Path]]]
) -> list[Entry]:
    """The undecided entries that could still win: one whose whole interval lies below
    the highest accepted reading so far (``runner.judge.gate.outpaced``) is judged as
    final now, rolled back unless its pairs already accept it, and measured no longer.
    On a noisy machine an identical candidate's interval stays wider than the 1% the
    gate needs to reject it early, so without this a tournament lasted as long as its
    least clear entry (the CPU demo: 12 pairs for the A/A beside a speed-up clear at 2)."""
    accepted = [e for e in entries if e.judged is not None and e.judged.gate.decision.accepted]
    if not accepted:
        return undecided
    leader = max(accepted, key=lambda e: e.judged.gate.delta_pct if e.judged else 0.0)
    assert leader.judged is not None
    lead = leader.judged.gate.delta_pct
    still = []
    for e in undecided:
        assert e.judged is not None and e.view is not None
        if not outpaced(e.judged.gate, lead):
            still.append(e)
            continue
        judged = judge(
            e.view, paths[e.role], Comparison(roles=("incumbent", e.role)), e.vetoes, final=True
        )
        e.outpaced_by = leader.n
        if not judged.gate.decision.accepted:
            gain = e.judged.gate
            why = (
                f"stopped at {gain.pairs_used} pair(s): round-{leader.n} was accepted at "
                f"{fmt_gain(lead, leader.judged.gate)} against the same incumbent, and this "
                f"candidate's whole 95% interval ({fmt_gain(gain.delta_pct, gain)}) lies "
                "below it, so more pairs could not make it this tournament's best; "
                "retry it on the new head"
            )
            judged = replace(judged, gate=replace(judged.gate, reasons=(why, *judged.gate.reasons)))
        e.judged = judged
    return still


def _measure(
    rnd: RoundPlan,
    trees: dict[str, Path],
    shapes: list[Shape],
    asked: int,
    todo: list[Entry],
    beside: BesideWork,
) -> dict[str, list[Path]] | None:
    """One measurement of ``trees``; None when an entry left ``todo`` (its focused test
    failed beside the workers' start-up, or its worker failed): measure again without."""
    try:
        return measure_roles(rnd, trees, shapes, asked, last_index(rnd.tmp), beside=beside)
    except FocusedTestFailed:  # the tests beside the start-up (EntryTests)
        todo[:] = [e for e in todo if not e.vetoes and not e.failure]
        return None
    except MeasurementFailed as exc:
        culprit = _culprit(exc, todo)
        if culprit is None:
            raise
        culprit.failure = f"a worker of this candidate failed: {exc}"
        todo.remove(culprit)
        return None


def _culprit(exc: MeasurementFailed, todo: Sequence[Entry]) -> Entry | None:
    """The entry whose worker failed, from its folder's name (``pass-NN-<role>``, a
    shard's ``pass-NN-<role>-gpuK``); None when it was the incumbent's or unknown."""
    folder = exc.log_path.parent.name if exc.log_path is not None else ""
    role = folder.split("-", 2)[-1] if folder.startswith("pass-") else ""
    for e in todo:
        if role == e.role or role.startswith(f"{e.role}-gpu"):
            return e
    return None


def _keep_passes(rnd: RoundPlan, entry: Entry, paths: dict[str, list[Path]]) -> None:
    """The entry's view of the measurement, as a single round's scratch folder holds
    it: the incumbent's passes and its own (named ``pass-NN-candidate``), the turn
    log and the builds record."""
    for role, csvs in paths.items():
        for csv in csvs:
            name = csv.parent.name
            if role == entry.role:
                name = name.replace(entry.role, "candidate", 1)
            copy_plain_tree(csv.parent, entry.dir / name)
    for extra in [*rnd.tmp.glob("turns*.jsonl"), *rnd.tmp.glob("memory*.json"), rnd.tmp / BUILDS]:
        if extra.is_file():
            shutil.copy2(extra, entry.dir / extra.name)


def confirm_alone(
    rnd: RoundPlan, inc_tree: Path, entry: Entry, shapes: list[Shape], proven: BesideWork
) -> None:
    """A single round's ACCEPTED quick reading confirmed at the full level where that is
    due (``confirmation_due``: the level, the gain, the audit's risks) and asked for;
    else the reading with why not noted.  ``proven``: the tamper check's proof."""
    got, request = entry.judged, entry.request
    if got is None or not got.gate.decision.accepted or request.targeted:
        return
    full = level_shapes(rnd.manifest, "full")
    due = confirmation_due(
        request.level,
        got.gate.delta_pct,
        entry.risks,
        [s.label for s in shapes],
        [s.label for s in full],
    )
    if not due.why:
        return
    if not due.adds_shapes:
        why = (
            f"full-level confirmation not needed ({due.summary()}): the quick level "
            "measured every target shape"
        )
        entry.judged = _noted(got, why, last=True)
        return
    if not request.confirm:
        why = f"full-level confirmation skipped (--no-confirm) although due: {due.summary()}"
        entry.judged = _noted(got, why, last=True)
        return
    rnd.step("full-level confirmation")
    quick = (
        f"quick level {fmt_gain(got.gate.delta_pct, got.gate)} on "
        f"{len(shapes)} shape(s), ACCEPTED; upgraded to the full level "
        f"({len(full)} target shapes) for confirmation: {due.summary()}"
    )
    assert entry.tree is not None
    trees = {"incumbent": inc_tree, "candidate": entry.tree}
    samples = block_pairs(request.pairs or rnd.manifest.pairs)
    with rnd.times.step("full-level confirmation"):
        full_rnd = replace(rnd, level="full")
        confirmed = measure_and_judge(full_rnd, trees, full, samples, beside=proven)
    verdict = "confirmed" if confirmed.gate.decision.accepted else "NOT confirmed"
    entry.judged = _noted(confirmed, f"{quick}: {verdict}")


def _noted(judged: Judged, reason: str, *, last: bool = False) -> Judged:
    """``judged`` with ``reason`` first among its gate's reasons (the verdict's own
    first where ``last``: a note that changes nothing)."""
    gate = judged.gate
    reasons = (*gate.reasons, reason) if last else (reason, *gate.reasons)
    return replace(judged, gate=replace(gate, reasons=reasons))


def confirm(
    rnd: RoundPlan,
    inc_tree: Path,
    entries: Sequence[Entry],
    shapes: list[Shape],
    proven: BesideWork,
) -> None:
    """The accepted entries, best reading first, each measured afresh against the
    incumbent (a single round's measurement, sequential as always) until one is
    confirmed (``runner.judge.gate.confirms``: the gate accepts the fresh pairs, or
    their gain's whole interval lies above 1% with no shape near a 5% regression; the
    measurement stops there): it wins, recorded with the fresh numbers.  The ones not
    confirmed roll back with both readings.  On the CPU demo the gate wanted 20 fresh
    pairs for a +10% gain at 6.8% a pair, as many as the tournament had measured.
    ``proven``: the tamper check's proof, before every first timed turn."""
    accepted = sorted((e for e in entries if e.accepted_reading), key=lambda e: -_gain(e))
    for e in accepted:
        assert e.tree is not None and e.reading is not None
        rnd.progress(
            f"round-{e.n}: confirming {fmt_gain(e.reading.delta_pct, e.reading)} by a fresh "
            "paired measurement against the incumbent"
        )
        _set_aside(e.dir)
        # the entry's own round: its folder and number, its own JIT cache claims (in
        # its folder); the builds, the role folders and the clock shared
        conf = replace(rnd, tmp=e.dir, round=e.n, jit_folders=JitFolders())
        samples = block_pairs(e.request.pairs or rnd.manifest.pairs)
        trees = {"incumbent": inc_tree, "candidate": e.tree}
        got = measure_and_judge(
            conf, trees, shapes, samples, vetoes=e.vetoes, settled=confirms, beside=proven
        )
        e.confirmed = got
        said = (
            f"tournament reading {fmt_gain(e.reading.delta_pct, e.reading)}; a fresh paired "
            f"measurement against the incumbent read {fmt_gain(got.gate.delta_pct, got.gate)}"
        )
        if confirms(got.gate):
            e.won = True
            gate = got.gate if got.gate.decision.accepted else _confirmed(got.gate, e.reading)
            e.judged = replace(got, gate=replace(gate, reasons=(*gate.reasons, said)))
            return
        why = f"not confirmed: {said}"
        e.judged = replace(got, gate=replace(got.gate, reasons=(why, *got.gate.reasons)))


def _confirmed(fresh: GateResult, reading: GateResult) -> GateResult:
    """The round's verdict when the fresh measurement confirmed the tournament's reading
    by its interval (``confirms``) before the gate itself would accept it: the reading's
    decision (it passed the gate), the fresh measurement's numbers (not picked from
    several entries' noise)."""
    why = (
        "confirmed: the fresh paired gain's whole 95% interval lies above 1% and no "
        "gating shape's interval reaches a 5% regression; in the tournament the gate "
        f"accepted it ({reading.reasons[0] if reading.reasons else reading.decision.value})"
    )
    return replace(fresh, decision=reading.decision, reasons=(why,), more_pairs=0)


def _gain(entry: Entry) -> float:
    return entry.reading.delta_pct if entry.reading is not None else 0.0


def _set_aside(folder: Path) -> None:
    """Move the tournament's files of an entry into ``tournament/`` of its folder, so a
    confirmation's passes and merged CSVs take their single-round names."""
    dest = folder / "tournament"
    dest.mkdir()
    for path in sorted(folder.iterdir()):
        if path != dest and (path.name.startswith("pass-") or path.suffix == ".csv"):
            path.rename(dest / path.name)
