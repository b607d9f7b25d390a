"""What ``campaign validate`` refuses before anything is written (``runner.flow.validate``):
the round numbers, the hypotheses, the diagnosis of the last rollback, each entry's
change (it applies to the lineage head, it stays in the kernel's scope unless declared,
it is new: Rule 7), a targeted round's shapes, a checkout a rollback would lose, and
the environment against the current best's.  One request is a single round; two or
more are a tournament (docs/protocol.md §1.5), whose entries are consecutive rounds,
each with its own ``--patch``; one of them that cannot be applied fails alone, and a
tournament none of whose entries can be measured is refused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from runner.compare.entries import Entry
from runner.compare.shapes import level_shapes
from runner.core.errors import ConfigError, NothingToDo, RepeatedHypothesis, RoundOutOfOrder
from runner.core.limits import MAX_TOURNAMENT_ENTRIES
from runner.core.outcomes import RoundResult
from runner.flow.checkout import plan_restore
from runner.judge.resubmission import names_in
from runner.round.judge_files import check_scope
from runner.round.result import (
    Request,
    check_diagnosis,
    check_new,
    check_round_number,
    check_targeted,
    current_best,
)
from runner.store.campaign import Campaign
from runner.store.fingerprint import FingerprintDiff
from runner.store.fingerprint_check import check_round_comparable
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name
from runner.targets.registry import manifest_target

MAX_ENTRIES = MAX_TOURNAMENT_ENTRIES  # hypotheses of one tournament, at most


@dataclass
class Checked:
    """The requests as they passed the checks: one entry each (its change, the files it
    touches, what it declares outside the kernel's scope, or why it fails alone), the
    round a given diagnosis is about, whether a rollback restores the user's checkout, the
    current best and the environment differences the user overrides."""

    entries: list[Entry]
    best: RoundResult
    diagnosed: int | None = None
    restores: bool = False
    blocking: list[FingerprintDiff] = field(default_factory=list)

    @property
    def several(self) -> bool:
        return len(self.entries) > 1


def check_requests(campaign: Campaign, requests: Sequence[Request]) -> Checked:
    """Every refusal before anything is written, in the order a user meets them."""
    if not requests:
        raise ConfigError("nothing to validate: give a --hypothesis and its change")
    several = len(requests) > 1
    if several:
        _check_tournament(requests)
    check_round_number(campaign, requests[0].round)
    _check_hypotheses(requests)
    diagnosed = check_diagnosis(campaign, requests[0])
    m = campaign.manifest
    lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
    entries = [_entry(lineage, r, k, several) for k, r in enumerate(requests, start=1)]
    for entry in entries:
        entry.again = _check_new(campaign, lineage, entry, several)
    check_targeted(requests[0], level_shapes(m, requests[0].level))
    target = manifest_target(m)
    for entry in entries:
        if entry.failure is None:
            with _fails_alone(entry, several):
                declared = check_scope(m, target, entry.touched, entry.request.allow_outside)
                entry.declared = declared
    if all(e.failure for e in entries):
        lines = "\n".join(f"  round-{e.n}: {e.failure}" for e in entries)
        raise ConfigError(f"no entry of the tournament can be measured:\n{lines}")
    first = entries[0]
    restores = not several and plan_restore(
        lineage, first.patch, from_checkout=first.from_checkout, restore=first.request.restore
    )
    best = current_best(campaign)
    diffs = check_round_comparable(campaign, best.round, requests[0].allow_env_mismatch)
    blocking = [d for d in diffs if d.perf_relevant] if requests[0].allow_env_mismatch else []
    return Checked(entries, best, diagnosed, restores, blocking)


def _entry(lineage: Lineage, request: Request, position: int, several: bool) -> Entry:
    """The request's entry with its change (a single round without ``--patch``: the
    user's working-tree diff) and the files it touches."""
    from_checkout = request.patch is None
    patch = lineage.working_tree_patch() if request.patch is None else request.patch
    entry = Entry(
        replace(request, patch=patch), position, alone=not several, from_checkout=from_checkout
    )
    with _fails_alone(entry, several):
        entry.touched = lineage.check_patch(patch)
    return entry


@contextlib.contextmanager
def _fails_alone(entry: Entry, several: bool) -> Iterator[None]:
    """Inside it, a refusal of a tournament entry's change fails that entry alone
    (``Entry.failure``); a single round's is raised."""
    try:
        yield
    except (ConfigError, NothingToDo) as exc:
        if not several:
            raise
        entry.failure = f"refused before measuring: {exc}"


def _check_tournament(requests: Sequence[Request]) -> None:
    """Two or more requests: at most MAX_ENTRIES, different changes, consecutive rounds,
    each with its own ``--patch``, judged on the level's shapes."""
    if len(requests) > MAX_ENTRIES:
        raise ConfigError(
            f"{len(requests)} entries; a tournament takes at most {MAX_ENTRIES}: split them"
        )
    _check_distinct(requests)
    for k, request in enumerate(requests):
        if request.round != requests[0].round + k:
            raise RoundOutOfOrder("a tournament's entries are consecutive rounds N, N+1, ...")
        if request.patch is None:
            raise ConfigError("every tournament entry needs its --patch FILE")
    if requests[0].targeted:
        raise ConfigError(
            "--target-shape judges a single round on the shapes it names; a tournament "
            "judges every entry on its level's shapes: run the targeted change as a round "
            "of its own"
        )


def _check_hypotheses(requests: Sequence[Request]) -> None:
    for k, request in enumerate(requests):
        if request.hypothesis.strip():
            continue
        if len(requests) == 1:
            raise ConfigError("state the hypothesis before the change: --hypothesis TEXT")
        raise ConfigError(
            f"entry {k + 1} (round {request.round}) states no hypothesis: give every "
            "--patch its --hypothesis, or make the patch with `git format-patch` so its "
            "subject is the hypothesis"
        )


def _check_new(campaign: Campaign, lineage: Lineage, entry: Entry, several: bool) -> int | None:
    """Rule 7 (``check_new``): a change that repeats a judged round's hypothesis or
    patch, or runs a rolled-back round's code again, is refused before anything is
    written (a tournament's entry named; the whole tournament refused); returns the
    rolled-back round a ``--resubmit`` change runs again."""
    try:
        return check_new(
            campaign,
            entry.request.hypothesis,
            entry.patch,
            lambda p: names_in(lineage.text_at_head(p)),
            resubmit=entry.request.resubmit,
        )
    except RepeatedHypothesis as exc:
        if not several:
            raise
        raise RepeatedHypothesis(
            f"tournament entry round-{entry.n}: {exc}", earlier=exc.earlier, same=exc.same
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


__all__ = ["MAX_ENTRIES", "Checked", "check_requests"]
