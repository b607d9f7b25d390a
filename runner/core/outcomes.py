"""Typed results shared by scoring, the gate, the records and the rounds.

Plain dataclasses (no pydantic): the worker side may import this module too.
Every class has ``to_dict``/``from_dict`` so that results travel as JSON.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import TypedDict, cast

from runner.core.isa_facts import KernelFacts
from runner.core.step_times import StepTimes, StepTimesDict, read_step_times


class Decision(str, Enum):
    """The gate's verdict on a candidate."""

    ACCEPTED = "ACCEPTED"
    ACCEPTED_TRADEOFF = "ACCEPTED_TRADEOFF"
    ROLLED_BACK = "ROLLED_BACK"
    NEEDS_REMEASURE = "NEEDS_REMEASURE"

    @property
    def accepted(self) -> bool:
        return self in (Decision.ACCEPTED, Decision.ACCEPTED_TRADEOFF)


class Status(str, Enum):
    """What a closed round is, as the records write it."""

    BASELINE = "BASELINE"
    ACCEPTED = "ACCEPTED"
    ROLLED_BACK = "ROLLED BACK"
    FAILED = "FAILED"


# --------------------------------------------------------------------------- records
# The JSON each class's ``to_dict`` writes and its ``from_dict`` reads.


class _ShapeScoreKeys(TypedDict):
    label: str
    check: str
    value: float | None


class ShapeScoreDict(_ShapeScoreKeys, total=False):
    """``ShapeScore.to_dict``; a record written before a field lacks it."""

    forward: float | None
    backward: float | None
    forward_ms: float | None
    backward_ms: float | None
    snr: float | None


ScoreDict = TypedDict(
    "ScoreDict",
    {
        "metric": str,
        "aggregate": float,
        "shapes": list[ShapeScoreDict],
        "pass": int,
        "fail": int,
    },
)


class ShapeDeltaDict(TypedDict):
    label: str
    best: float | None
    candidate: float | None
    delta_pct: float | None
    check: str


class IntervalDict(TypedDict):
    mean_pct: float
    half_width_pct: float | None
    spread_pct: float | None
    pairs: int


class PairedEvidenceDict(TypedDict):
    gain: IntervalDict
    shapes: dict[str, IntervalDict]
    remeasure_size: int


class _GateResultKeys(TypedDict):
    decision: str
    metric: str
    best_aggregate: float
    candidate_aggregate: float
    delta_pct: float
    shapes: list[ShapeDeltaDict]
    regressed: list[str]
    reasons: list[str]
    threshold_pct: float | None
    pairs_used: int
    evidence: PairedEvidenceDict | None
    more_pairs: int
    pair_gains_pct: list[float]


class GateResultDict(_GateResultKeys, total=False):
    """``GateResult.to_dict``: the ``campaign gate --json`` contract (``looks`` where
    the measurement recorded them)."""

    looks: list[int]


class PairSampleDict(TypedDict):
    incumbent: dict[str, float]
    candidate: dict[str, float]


class TransferCheckDict(TypedDict, total=False):
    """``TransferCheck.to_dict``; a key a record lacks takes the field's default."""

    bucket: str
    cache_key: str
    id_audit: str
    hit_rate_trace: str
    skew_robustness: str
    benchmark_gain_pct: float | None
    estimated_real_gain_pct: float | None
    decision: str


class RollbackDict(TypedDict):
    change: str
    expected: str
    actual: str
    root_cause: str
    lesson: str


class TournamentNoteDict(TypedDict):
    first: int
    last: int
    winner: int | None
    line: str
    retry: list[int]


class _RoundResultKeys(TypedDict):
    round: int
    status: str
    level: str
    hypothesis: str
    change: str
    description: str
    started: str
    finished: str
    test_command: str
    benchmark_command: str
    score: ScoreDict
    baseline: ScoreDict
    best: ScoreDict | None
    gate: GateResultDict | None
    reasons: list[str]
    artifacts: list[str]
    attribution: str
    next_direction: str
    key_finding: str
    rollback: RollbackDict | None
    transfer: TransferCheckDict
    commit: str | None


class RoundResultDict(_RoundResultKeys, total=False):
    """``RoundResult.to_dict`` (``result.json``); the keys below only where set."""

    tournament: TournamentNoteDict
    gate_constants: str
    kernel_facts: dict[str, object]
    platform: str
    step_times: StepTimesDict


@dataclass(frozen=True)
class ShapeScore:
    """One row of a pinned CSV, scored.  ``value`` is the primary metric (None when
    the row FAILed); ``forward``/``backward`` are the diagnostics (None when absent)."""

    label: str
    check: str  # "PASS" or "FAIL" (ERROR is normalised to FAIL)
    value: float | None
    forward: float | None = None
    backward: float | None = None
    forward_ms: float | None = None
    backward_ms: float | None = None
    # the worst signal-to-noise ratio (dB) over the row's ``*_snr`` columns (Rule 4's
    # per-shape SNR); None when the schema has none (older results lack it too)
    snr: float | None = None

    def to_dict(self) -> ShapeScoreDict:
        # every field, as the dataclass holds them: a new field is written too
        return cast(ShapeScoreDict, dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: ShapeScoreDict) -> ShapeScore:
        return cls(**d)


@dataclass(frozen=True)
class Score:
    """A scored CSV: the primary metric's column name, the aggregate (geomean over
    PASS shapes, 0 when any row FAILs) and the per-shape vector."""

    metric: str
    aggregate: float
    shapes: tuple[ShapeScore, ...]
    n_pass: int
    n_fail: int

    def by_label(self) -> dict[str, ShapeScore]:
        return {s.label: s for s in self.shapes}

    def to_dict(self) -> ScoreDict:
        return {
            "metric": self.metric,
            "aggregate": self.aggregate,
            "shapes": [s.to_dict() for s in self.shapes],
            "pass": self.n_pass,
            "fail": self.n_fail,
        }

    @classmethod
    def from_dict(cls, d: ScoreDict) -> Score:
        return cls(
            metric=d["metric"],
            aggregate=float(d["aggregate"]),
            shapes=tuple(ShapeScore.from_dict(s) for s in d["shapes"]),
            n_pass=int(d["pass"]),
            n_fail=int(d["fail"]),
        )


@dataclass(frozen=True)
class ShapeDelta:
    label: str
    best: float | None
    candidate: float | None
    delta_pct: float | None
    check: str

    def to_dict(self) -> ShapeDeltaDict:
        # every field, as the dataclass holds them: a new field is written too
        return cast(ShapeDeltaDict, dataclasses.asdict(self))


@dataclass(frozen=True)
class Interval:
    """One estimate of the paired evidence as the gate recorded it: the mean change in
    percent, its 95% half-width and the spread of one pair (percent; None with one
    pair), over ``pairs`` pairs (``runner.judge.evidence.Estimate.to_dict``)."""

    mean_pct: float
    half_width_pct: float | None
    spread_pct: float | None
    pairs: int

    def to_dict(self) -> IntervalDict:
        return {
            "mean_pct": self.mean_pct,
            "half_width_pct": self.half_width_pct,
            "spread_pct": self.spread_pct,
            "pairs": self.pairs,
        }

    @classmethod
    def from_dict(cls, d: IntervalDict) -> Interval:
        def opt(value: float | None) -> float | None:
            return None if value is None else float(value)

        return cls(
            float(d["mean_pct"]),
            opt(d.get("half_width_pct")),
            opt(d.get("spread_pct")),
            int(d.get("pairs") or 0),
        )


@dataclass(frozen=True)
class PairedEvidence:
    """The paired evidence a verdict was judged on: the paired gain, each gating shape's
    paired mean, and the size of one re-measurement (``runner.judge.evidence``)."""

    gain: Interval
    shapes: dict[str, Interval]
    remeasure_size: int = 1

    def to_dict(self) -> PairedEvidenceDict:
        return {
            "gain": self.gain.to_dict(),
            "shapes": {label: est.to_dict() for label, est in self.shapes.items()},
            "remeasure_size": self.remeasure_size,
        }

    @classmethod
    def from_dict(cls, d: PairedEvidenceDict | None) -> PairedEvidence | None:
        """None for a record without evidence (or an empty one)."""
        if not d or not d.get("gain"):
            return None
        shapes = {str(k): Interval.from_dict(v) for k, v in (d.get("shapes") or {}).items()}
        return cls(Interval.from_dict(d["gain"]), shapes, int(d.get("remeasure_size") or 1))


@dataclass(frozen=True)
class GateResult:
    """The gate's output; ``to_dict`` is the ``campaign gate --json`` contract."""

    decision: Decision
    metric: str
    best_aggregate: float
    candidate_aggregate: float
    delta_pct: float
    shapes: tuple[ShapeDelta, ...]
    regressed: tuple[str, ...]
    reasons: tuple[str, ...]
    threshold_pct: float | None = None
    pairs_used: int = 0
    # the paired evidence judged (``runner.judge.evidence``): the paired gain and each
    # gating shape's mean with its interval, the re-measurement size; None without pairs
    evidence: PairedEvidence | None = None
    more_pairs: int = 0  # NEEDS_REMEASURE: the fresh pairs the gate asks for next
    # G_i - 1 in percent for every interleaved pair the gate was given (on the shapes
    # the verdict was judged on), whichever rule decided: the spread behind the gain
    pair_gains_pct: tuple[float, ...] = ()
    # the pair counts the measurement judged at, in order (the sequential looks that
    # ended in this verdict: ``runner.judge.false_accept``); () where not recorded
    looks: tuple[int, ...] = ()

    def to_dict(self) -> GateResultDict:
        out: GateResultDict = {
            "decision": self.decision.value,
            "metric": self.metric,
            "best_aggregate": self.best_aggregate,
            "candidate_aggregate": self.candidate_aggregate,
            "delta_pct": self.delta_pct,
            "shapes": [s.to_dict() for s in self.shapes],
            "regressed": list(self.regressed),
            "reasons": list(self.reasons),
            "threshold_pct": self.threshold_pct,
            "pairs_used": self.pairs_used,
            "evidence": self.evidence.to_dict() if self.evidence else None,
            "more_pairs": self.more_pairs,
            "pair_gains_pct": list(self.pair_gains_pct),
        }
        if self.looks:  # a record without looks reads as it was
            out["looks"] = list(self.looks)
        return out

    @classmethod
    def from_dict(cls, d: GateResultDict) -> GateResult:
        return cls(
            decision=Decision(d["decision"]),
            metric=d["metric"],
            best_aggregate=float(d["best_aggregate"]),
            candidate_aggregate=float(d["candidate_aggregate"]),
            delta_pct=float(d["delta_pct"]),
            shapes=tuple(ShapeDelta(**s) for s in d["shapes"]),
            regressed=tuple(d["regressed"]),
            reasons=tuple(d["reasons"]),
            threshold_pct=d.get("threshold_pct"),
            pairs_used=int(d.get("pairs_used", 0)),
            evidence=PairedEvidence.from_dict(d.get("evidence")),
            more_pairs=int(d.get("more_pairs", 0)),
            pair_gains_pct=tuple(float(x) for x in d.get("pair_gains_pct", ())),
            looks=tuple(int(n) for n in d.get("looks", ())),
        )


@dataclass(frozen=True)
class PairSample:
    """One interleaved pass pair: the primary metric per shape for the incumbent and
    the candidate, measured back to back on the same device (higher is better)."""

    incumbent: dict[str, float]
    candidate: dict[str, float]

    def to_dict(self) -> PairSampleDict:
        return {"incumbent": dict(self.incumbent), "candidate": dict(self.candidate)}

    @classmethod
    def from_dict(cls, d: PairSampleDict) -> PairSample:
        return cls(incumbent=dict(d["incumbent"]), candidate=dict(d["candidate"]))


@dataclass
class TransferCheck:
    """docs/protocol.md §8.5: the real-training transfer check of one round."""

    bucket: str = "K1"
    cache_key: str = "none"
    id_audit: str = "no cache added; no id()-keyed state found"
    hit_rate_trace: str = "n/a (no cache added)"
    skew_robustness: str = "n/a (not a grouped GEMM)"
    benchmark_gain_pct: float | None = None
    estimated_real_gain_pct: float | None = None
    decision: str = "ACCEPT-as-real"  # ACCEPT-as-real | ACCEPT-with-asterisk | REJECT-as-overfit

    def to_dict(self) -> TransferCheckDict:
        # every field, as the dataclass holds them: a new field is written too
        return cast(TransferCheckDict, dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: TransferCheckDict) -> TransferCheck:
        return cls(**d)


@dataclass
class RollbackAnalysis:
    change: str
    expected: str
    actual: str
    root_cause: str
    lesson: str

    def to_dict(self) -> RollbackDict:
        # every field, as the dataclass holds them: a new field is written too
        return cast(RollbackDict, dataclasses.asdict(self))


@dataclass
class TournamentNote:
    """A round judged in a tournament (docs/protocol.md §1.5): its rounds ``first`` to
    ``last``, the round that won (None: none), the one line that says which won and
    why, and the accepted entries it superseded, to retry on the new head."""

    first: int
    last: int
    winner: int | None
    line: str
    retry: list[int] = field(default_factory=list)

    def to_dict(self) -> TournamentNoteDict:
        # every field, as the dataclass holds them: a new field is written too
        return cast(TournamentNoteDict, dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, d: TournamentNoteDict) -> TournamentNote:
        winner = d.get("winner")
        return cls(
            int(d["first"]),
            int(d["last"]),
            None if winner is None else int(winner),
            str(d["line"]),
            [int(n) for n in d.get("retry", [])],
        )


@dataclass
class RoundResult:
    """Everything the records need to close one round.  The only object the writers
    (summary.md, optimize.md, performance_trend.md) consume."""

    round: int
    status: Status
    level: str  # "quick" | "full"
    hypothesis: str
    change: str
    description: str
    started: str  # YYYY-MM-DD HH:MM
    finished: str
    test_command: str
    benchmark_command: str
    score: Score  # the candidate's (or baseline's) pinned-CSV score
    baseline: Score  # round-1's score, for "vs baseline"
    best: Score | None  # the current best before this round (None for round-1)
    gate: GateResult | None = None
    reasons: list[str] = field(default_factory=list)
    artifacts: list[str] = field(default_factory=list)
    attribution: str = ""
    next_direction: str = ""
    key_finding: str = ""
    rollback: RollbackAnalysis | None = None
    transfer: TransferCheck = field(default_factory=TransferCheck)
    commit: str | None = None
    tournament: TournamentNote | None = None  # judged in a tournament
    # sha256 of the gate constants that judged it (runner.judge.gate_constants: the
    # digest docs/gate-constants.jsonl names); None in a result written before
    gate_constants: str | None = None
    # The ISA facts of both roles (runner.round.kernel_facts.round_facts); None in a
    # result written before docs/analysis.md
    kernel_facts: KernelFacts | None = None
    # the stack's platform layer the round ran under (a non-AMD run of an AMD target:
    # runner.store.stack_platform); None: the target's own platform
    platform: str | None = None
    # The wall time of each of the round's steps (runner.core.step_times); None in a
    # result written before
    step_times: StepTimes | None = None

    def to_dict(self) -> RoundResultDict:
        out: RoundResultDict = {
            "round": self.round,
            "status": self.status.value,
            "level": self.level,
            "hypothesis": self.hypothesis,
            "change": self.change,
            "description": self.description,
            "started": self.started,
            "finished": self.finished,
            "test_command": self.test_command,
            "benchmark_command": self.benchmark_command,
            "score": self.score.to_dict(),
            "baseline": self.baseline.to_dict(),
            "best": self.best.to_dict() if self.best else None,
            "gate": self.gate.to_dict() if self.gate else None,
            "reasons": list(self.reasons),
            "artifacts": list(self.artifacts),
            "attribution": self.attribution,
            "next_direction": self.next_direction,
            "key_finding": self.key_finding,
            "rollback": self.rollback.to_dict() if self.rollback else None,
            "transfer": self.transfer.to_dict(),
            "commit": self.commit,
        }
        if self.tournament is not None:  # a single round's result.json is as it was
            out["tournament"] = self.tournament.to_dict()
        if self.gate_constants is not None:
            out["gate_constants"] = self.gate_constants
        if self.kernel_facts is not None:
            out["kernel_facts"] = self.kernel_facts.to_dict()
        if self.platform is not None:
            out["platform"] = self.platform
        if self.step_times is not None:
            out["step_times"] = self.step_times.to_dict()
        return out

    @classmethod
    def from_dict(cls, d: RoundResultDict) -> RoundResult:
        return cls(
            round=int(d["round"]),
            status=Status(d["status"]),
            level=d["level"],
            hypothesis=d["hypothesis"],
            change=d["change"],
            description=d["description"],
            started=d["started"],
            finished=d["finished"],
            test_command=d["test_command"],
            benchmark_command=d["benchmark_command"],
            score=Score.from_dict(d["score"]),
            baseline=Score.from_dict(d["baseline"]),
            best=Score.from_dict(best) if (best := d.get("best")) else None,
            gate=GateResult.from_dict(gate) if (gate := d.get("gate")) else None,
            reasons=list(d.get("reasons", [])),
            artifacts=list(d.get("artifacts", [])),
            attribution=d.get("attribution", ""),
            next_direction=d.get("next_direction", ""),
            key_finding=d.get("key_finding", ""),
            rollback=RollbackAnalysis(**rollback) if (rollback := d.get("rollback")) else None,
            transfer=TransferCheck.from_dict(d.get("transfer") or {}),
            commit=d.get("commit"),
            tournament=TournamentNote.from_dict(d["tournament"]) if d.get("tournament") else None,
            gate_constants=d.get("gate_constants"),
            kernel_facts=_facts(d.get("kernel_facts")),
            platform=d.get("platform"),
            step_times=read_step_times(d.get("step_times")),
        )


def _facts(doc: object) -> KernelFacts | None:
    """A result's kernel facts, None where it recorded none."""
    return KernelFacts.from_dict(doc) if isinstance(doc, Mapping) and doc else None
