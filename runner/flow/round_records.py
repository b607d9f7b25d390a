"""What every VALIDATE round closes with, a single round's or a tournament entry's: the
request, the RoundResult of a verdict (``round_result``), of a round vetoed before it
was measured (``veto_only``) and of one that failed to measure (``close_failed``), and
the behaviour-transfer update from what the workers saw."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runner.core.errors import ConfigError
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
from runner.flow.measure import pairing_words
from runner.flow.passes import fresh_gains, state_report
from runner.flow.round_context import Round
from runner.judge.audit import DECLARABLE
from runner.judge.gate_constants import current_digest
from runner.judge.vetoes import state_transfer
from runner.store.campaign import Campaign
from runner.store.roundfiles import artifact_list, describe_patch, store_artifacts


def now() -> str:
    return now_minute()


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

    def __post_init__(self) -> None:
        """Refuse a pair count or a hypothesis out of bounds (``runner.core.limits``)
        before anything is measured or recorded."""
        if self.pairs is not None:
            check_blocks(self.pairs, "--pairs")
        if self.bucket.strip().upper() not in DECLARABLE:
            raise ConfigError(
                f"--bucket {excerpt(self.bucket)} is not a transfer bucket: give one of "
                f"{', '.join(DECLARABLE)} (docs/protocol.md §8.2); nothing was measured"
            )
        check_size(
            self.hypothesis, MAX_HYPOTHESIS_CHARS, "the hypothesis",
            "state it in a few sentences (the detail belongs in the patch's commit message)",
        )  # fmt: skip


def behaviour_transfer(rnd: Round, transfer: TransferCheck, gate: GateResult) -> TransferCheck:
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


def veto_only(
    rnd: Round, vetoes: list[str], shapes: list[Shape]
) -> tuple[GateResult, Score, Score]:
    metric = rnd.manifest.primary_metric
    empty = Score(
        metric, 0.0, tuple(ShapeScore(s.label, "FAIL", None) for s in shapes), 0, len(shapes)
    )
    gate = GateResult(Decision.ROLLED_BACK, metric, 0.0, 0.0, 0.0, (), (), tuple(vetoes))
    return gate, empty, empty


def check_round_number(campaign: Campaign, n: int) -> None:
    """Refuse a VALIDATE round numbered other than the campaign's next."""
    expected = campaign.next_round()
    if expected == 1:
        raise ConfigError("no baseline yet: run `campaign baseline` first")
    if n != expected:
        raise ConfigError(
            f"round {n} is not the next round: round-{expected - 1} is the last "
            f"closed one, so run `campaign validate --round {expected}` (round numbers "
            "are never reused)"
        )


def current_best(campaign: Campaign) -> RoundResult:
    best = campaign.last_accepted()
    if best is None:
        raise ConfigError("no accepted round (not even the baseline) is recorded")
    return best


def baseline_score(campaign: Campaign) -> Score:
    return campaign.load_result(1).score


def _shared_fields(rnd: Round, request: Request, change: str, started: str) -> dict[str, Any]:
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
    }


def round_result(
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
    rnd.step("artifacts")
    store_artifacts(rnd.campaign, rnd.round, rnd.tmp, gate=gate)
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
        **_shared_fields(rnd, request, change, started),
        status=status,
        score=cand,
        best=inc,
        gate=gate,
        reasons=list(gate.reasons),
        attribution=f"single change to {', '.join(touched)}; incumbent and candidate measured "
        f"on the same device, {pairing_words(rnd.executor)}",
        next_direction="continue along this direction"
        if status is Status.ACCEPTED
        else "diagnose and try another approach to the same bottleneck",
        key_finding=f"{gate.decision.value}: geomean {gate.delta_pct:+.3f}% vs incumbent",
        rollback=rollback,
        commit=commit,
    )


def failed_result(
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
    store_artifacts(campaign, rnd.round, rnd.tmp)
    labels = [s.label for s in best.score.shapes]
    empty = Score(
        m.primary_metric, 0.0, tuple(ShapeScore(lb, "FAIL", None) for lb in labels), 0, len(labels)
    )
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
