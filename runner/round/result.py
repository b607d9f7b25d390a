"""What every VALIDATE round closes with, a single round's or a tournament entry's: the
request, the RoundResult of a verdict (``round_result``), of a round vetoed before it
was measured (``veto_only``) and of one that failed to measure (``close_failed``), and
the behaviour-transfer update from what the workers saw."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from runner.compare.loop import pairing_words
from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.errors import ConfigError, RepeatedHypothesis, RoundOutOfOrder, ValueRefused
from runner.core.isa_facts import KernelFacts
from runner.core.limits import MAX_HYPOTHESIS_CHARS, check_blocks, check_size, excerpt
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
from runner.core.shapes import Shape
from runner.core.timestamps import now_minute
from runner.judge.audit import DECLARABLE
from runner.judge.gate_constants import current_digest
from runner.judge.inconclusive import advice, inconclusive
from runner.judge.resubmission import Shape as ChangeShape
from runner.judge.resubmission import change_shape, holds_code
from runner.judge.scoring import component_metrics
from runner.judge.vetoes import state_transfer
from runner.measure.paired import launch_notes
from runner.measure.passes import fresh_gains, state_report
from runner.round.context import RoundPlan
from runner.round.kernel_facts import save_isa
from runner.store.campaign import Campaign
from runner.store.roundfiles import artifact_list, describe_patch, store_artifacts
from runner.store.stack_platform import platform_line


def now() -> str:
    return now_minute()


@dataclass(frozen=True)
class Request:
    round: int
    hypothesis: str
    patch: str | None  # None: the user's working-tree diff
    level: str = "quick"
    # On ROLLED BACK or FAILED put the checkout's edit back to the head (Rule 3);
    # False: --keep-checkout (runner.flow.checkout).
    restore: bool = True
    bucket: str = "K1"
    pairs: int | None = None
    gpus: tuple[int, ...] = ()
    allow_env_mismatch: str | None = None  # compare despite a fingerprint difference (why)
    # Paths outside kernel_source the change may touch (declared; recorded in the round).
    allow_outside: tuple[str, ...] = ()
    # The last rollback's diagnosis (Rule 7), given with this round: attribution,
    # root_cause, lesson (``check_diagnosis``); empty: none given.
    diagnosis: tuple[tuple[str, str], ...] = ()
    # A targeted round (Rule 3's exception, docs/protocol.md §5.4): judged on these shapes.
    targeted: tuple[str, ...] = ()
    # A quick round's acceptance confirmed at the full level when upstream's rule asks
    # (runner.judge.confirmation); False: --no-confirm, recorded in the round's reasons.
    confirm: bool = True
    # Measure a change that runs a rolled-back round's code again (only its comments,
    # whitespace or new names differ), judged against what is left of the campaign's
    # false-accept budget (``check_new``); False: such a change is refused (Rule 7).
    resubmit: bool = False

    def __post_init__(self) -> None:
        """Refuse a pair count or a hypothesis out of bounds (``runner.core.limits``)
        before anything is measured or recorded."""
        if self.pairs is not None:
            check_blocks(self.pairs, "--pairs")
        if self.bucket.strip().upper() not in DECLARABLE:
            raise ValueRefused(
                f"--bucket {excerpt(self.bucket)} is not a transfer bucket: give one of "
                f"{', '.join(DECLARABLE)} (docs/protocol.md §8.2); nothing was measured"
            )
        check_size(
            self.hypothesis,
            MAX_HYPOTHESIS_CHARS,
            "the hypothesis",
            "state it in a few sentences (the detail belongs in the patch's commit message)",
        )


def behaviour_transfer(rnd: RoundPlan, transfer: TransferCheck, gate: GateResult) -> TransferCheck:
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
        transfer,
        state_report(passes["candidate"]),
        state_report(passes["incumbent"]),
        gate,
        fresh,
    )


def veto_only(
    rnd: RoundPlan, vetoes: list[str], shapes: list[Shape]
) -> tuple[GateResult, Score, Score]:
    metric = component_metrics(rnd.manifest.primary_metric)[0]  # the one the records show
    empty = Score(
        metric, 0.0, tuple(ShapeScore(s.label, "FAIL", None) for s in shapes), 0, len(shapes)
    )
    gate = GateResult(Decision.ROLLED_BACK, metric, 0.0, 0.0, 0.0, (), (), tuple(vetoes))
    return gate, empty, empty


def check_round_number(campaign: Campaign, n: int) -> None:
    """Refuse a VALIDATE round numbered other than the campaign's next."""
    expected = campaign.next_round()
    if expected == 1:
        raise RoundOutOfOrder("no baseline yet: run `campaign baseline` first")
    if n != expected:
        raise RoundOutOfOrder(
            f"round {n} is not the next round: round-{expected - 1} is the last "
            f"closed one, so run `campaign validate --round {expected}` (round numbers "
            "are never reused)"
        )
    limit = campaign.manifest.max_iterations
    if limit is not None and n - 1 > limit:
        raise RoundOutOfOrder(
            f"round {n} would be attempt {n - 1}, past max_iterations {limit}: T3 holds and "
            "the campaign may end (`campaign report`, docs/protocol.md §7.2); to go on, "
            f"raise the limit first with `campaign set max_iterations {n - 1} --reason TEXT` "
            "(recorded in optimize.md)"
        )


def check_new(
    campaign: Campaign,
    hypothesis: str,
    patch: str,
    known: Callable[[str], set[str]] = lambda path: set(),
    *,
    resubmit: bool = False,
) -> int | None:
    """Rule 7 (upstream's iteration rules): after a rollback the next hypothesis is new.
    Refuse a hypothesis or a patch identical to a judged round's (ACCEPTED or ROLLED
    BACK; a FAILED round may be measured again), naming the round; and a patch that runs
    a rolled-back round's code again, differing only in comments, whitespace or the
    names it introduces (``runner.judge.resubmission``; ``known(path)``: the names the
    file holds at the lineage head), unless ``resubmit`` (``validate --resubmit``): then
    the last such round's number is returned, and the verdict is judged against what
    is left of the campaign's false-accept budget
    (``runner.judge.false_accept.against_what_is_left``), and a patch that runs no
    rolled-back round's code again is refused with it.  A change of comments alone
    (an A/A round, the gate's own calibration) may be measured again."""
    words = " ".join(hypothesis.split()).casefold()
    shape = change_shape(patch, known)
    code = shape if holds_code(shape) else None
    again: int | None = None
    for r in reversed(campaign.results()):
        if r.status not in (Status.ACCEPTED, Status.ROLLED_BACK):
            continue
        if not _runs_again(campaign, r, words, patch, code, known):
            continue
        if not resubmit:
            raise RepeatedHypothesis(
                f"this patch runs round-{r.round}'s rolled-back code again: it differs from "
                "that round's only in comments, whitespace or the names it introduces, and "
                "a second measurement of the same code is a second draw at the gate, not a "
                "new hypothesis; change what the code does (Rule 7), or measure it again "
                "with --resubmit, judged against what is left of the campaign's "
                "false-accept budget",
                earlier=r.round,
                same="code",
            )
        again = r.round if again is None else again
    if resubmit and again is None:
        raise ConfigError(
            "--resubmit measures a rolled-back round's code again, but this patch runs no "
            "rolled-back round's code: it is a new change; leave --resubmit out, so that "
            "its verdict is judged at the gate's own level"
        )
    return again


def _runs_again(
    campaign: Campaign,
    r: RoundResult,
    words: str,
    patch: str,
    code: ChangeShape | None,
    known: Callable[[str], set[str]],
) -> bool:
    """Whether the judged round ``r`` was rolled back running this patch's code
    (``code``: the patch's change shape, None when it changes no code); refused
    outright when ``r`` tested the same hypothesis (``words``) or this very patch."""
    if " ".join(r.hypothesis.split()).casefold() == words:
        raise RepeatedHypothesis(
            f"round-{r.round} ({r.status.value}) already tested this hypothesis: state a "
            "new one, informed by that round's result (Rule 7)",
            earlier=r.round,
            same="hypothesis",
        )
    earlier = campaign.round_dir(r.round) / CANDIDATE_PATCH
    if not earlier.is_file() or (r.tournament is not None and r.round in r.tournament.retry):
        return False  # a tournament's loser listed for a retry is measured on a new head
    text = earlier.read_text("utf-8")
    if text.strip() == patch.strip():
        raise RepeatedHypothesis(
            f"this patch is round-{r.round}'s ({r.status.value}), byte for byte: a round "
            "is judged once; change the candidate (Rule 7)",
            earlier=r.round,
            same="bytes",
        )
    return r.status is Status.ROLLED_BACK and code is not None and change_shape(text, known) == code


def check_diagnosis(campaign: Campaign, request: Request) -> int | None:
    """The rolled-back (or FAILED) round a given diagnosis is about: the last closed
    round; refused when it was accepted, or without a root cause and a lesson."""
    given = {k: v for k, v in request.diagnosis if v.strip()}
    if not given:
        return None
    last = campaign.results()[-1]
    if last.status not in (Status.ROLLED_BACK, Status.FAILED):
        raise ConfigError(
            f"--attribution/--root-cause/--lesson diagnose the last rollback, but round-"
            f"{last.round} is {last.status.value}: leave them out"
        )
    if not (given.get("root_cause") and given.get("lesson")):
        raise ConfigError(
            f"a diagnosis of round-{last.round}'s rollback needs --root-cause TEXT and "
            "--lesson TEXT (--attribution is optional)"
        )
    return last.round


def check_targeted(request: Request, shapes: Sequence[Shape]) -> None:
    """A targeted round's shapes must be measured at its level (--target-shape LABEL)."""
    labels = [s.label for s in shapes]
    unknown = [t for t in request.targeted if t not in labels]
    if unknown:
        raise ValueRefused(
            f"--target-shape {', '.join(unknown)}: not a shape of this round's "
            f"{request.level} level; pick from {', '.join(labels)} (or --level full)"
        )


def current_best(campaign: Campaign) -> RoundResult:
    best = campaign.last_accepted()
    if best is None:
        raise ConfigError("no accepted round (not even the baseline) is recorded")
    return best


def baseline_score(campaign: Campaign) -> Score:
    return campaign.load_result(1).score


class _Shared(TypedDict):
    """The fields of ``RoundResult`` that ``_shared_fields`` fills (checked against its
    signature where a result is made)."""

    round: int
    level: str
    hypothesis: str
    change: str
    description: str
    started: str
    finished: str
    test_command: str
    benchmark_command: str
    baseline: Score
    artifacts: list[str]
    gate_constants: str | None
    platform: str | None


def _shared_fields(rnd: RoundPlan, request: Request, change: str, started: str) -> _Shared:
    """What every round's result holds whatever its verdict: the round, its request,
    the change, its times, the commands, the baseline and the artifacts (stored
    first)."""
    m = rnd.manifest
    return {
        "round": rnd.round,
        "level": request.level,
        "hypothesis": request.hypothesis,
        "change": change,
        "description": request.hypothesis.strip().splitlines()[0][:80],
        "started": started,
        "finished": now(),
        "test_command": m.test_command,
        "benchmark_command": m.benchmark_command,
        "baseline": baseline_score(rnd.campaign),
        "artifacts": artifact_list(rnd.campaign, rnd.round),
        "gate_constants": current_digest(),
        "platform": platform_line(Path(m.source)),
    }


def round_result(
    rnd: RoundPlan,
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
    rnd.step("artifacts")
    store_artifacts(rnd.campaign, rnd.round, rnd.tmp, gate=gate)
    status = Status.ACCEPTED if gate.decision.accepted else Status.ROLLED_BACK
    change = describe_patch(patch, touched)
    rollback = None
    if status is Status.ROLLED_BACK:
        noisy = inconclusive(gate)
        rollback = RollbackAnalysis(
            change=change,
            expected=request.hypothesis,
            actual=f"{gate.delta_pct:+.3f}% geomean vs the incumbent; " + "; ".join(gate.reasons),
            root_cause="the measured effect did not support the hypothesis (see Results)"
            if noisy is None
            else f"not the change: {noisy.line()}",
            lesson="record the direction as ineffective unless a profile shows otherwise"
            if noisy is None
            else f"not shown ineffective; {advice(rnd.round)}",
        )
    return RoundResult(
        **_shared_fields(rnd, request, change, started),
        status=status,
        score=cand,
        best=inc,
        gate=gate,
        reasons=[*gate.reasons, *launch_notes(rnd.tmp)],
        attribution=f"single change to {', '.join(touched)}; incumbent and candidate measured "
        f"on the same device, {pairing_words(rnd.executor)}",
        next_direction="continue along this direction"
        if status is Status.ACCEPTED
        else "diagnose and try another approach to the same bottleneck",
        key_finding=f"{gate.decision.value}: geomean {gate.delta_pct:+.3f}% vs incumbent",
        rollback=rollback,
        commit=commit,
    )


def attach_facts(rnd: RoundPlan, result: RoundResult, facts: KernelFacts | None) -> None:
    """The round's kernel facts into its record, each role's ISA under profiles/round-N/
    (``runner.round.kernel_facts``, docs/analysis.md)."""
    if facts is None:
        return
    result.kernel_facts = save_isa(rnd.campaign, rnd.round, facts)


def failed_result(
    rnd: RoundPlan,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    best: RoundResult,
    why: str,
) -> RoundResult:
    campaign, m = rnd.campaign, rnd.manifest
    rnd.step("artifacts")
    store_artifacts(campaign, rnd.round, rnd.tmp)
    labels = [s.label for s in best.score.shapes]
    metric = component_metrics(m.primary_metric)[0]  # the one the records show
    empty = Score(metric, 0.0, tuple(ShapeScore(lb, "FAIL", None) for lb in labels), 0, len(labels))
    result = RoundResult(
        **_shared_fields(rnd, request, describe_patch(patch, touched), started),
        status=Status.FAILED,
        score=empty,
        best=best.score,
        gate=None,
        reasons=[why],
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
    return result
