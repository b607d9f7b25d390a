"""Rounds end to end: the baseline (round-1) and each VALIDATE round.

Flow: refuse bad requests before writing anything -> fresh worktrees of the incumbent
(the lineage head) and the candidate (head + patch) -> focused test -> interleaved
worker passes (B C C B) through the executor into a temporary folder -> merged pinned
CSVs -> the gate (more paired passes when it asks) -> artifacts copied into the round
folder -> kernel snapshot -> records (summary, both logs, result.json last) -> on
ACCEPTED the lineage commit and ref update, after the records.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.errors import ConfigError
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
from runner.core.shapes import Shape, shape_set, shapes_by_label
from runner.core.spec import RoundSpec, TimingSettings, save_spec, write_json_atomic
from runner.core.timestamps import now_minute
from runner.executors.base import BuiltRole, Executor, JobOutcome, WorkerJob
from runner.flow.build import built_roles, describe
from runner.flow.measure import RoundFailed, measure_and_judge, measure_roles
from runner.flow.passes import fresh_gains, state_report
from runner.flow.sharding import detect_vendor, gpu_env, pass_name, worker_failure
from runner.judge.import_cause import explain_failure
from runner.judge.vetoes import audit_candidate, state_transfer
from runner.store.appendlog import write_atomic
from runner.store.campaign import Campaign
from runner.store.fingerprint import FingerprintDiff
from runner.store.fingerprint_check import check_round_comparable, record_override
from runner.store.guard import preflight
from runner.store.leases import acquire
from runner.store.leftovers import job_dir, note_step
from runner.store.lineage import Lineage, snapshot
from runner.store.manifest import Manifest, branch_name
from runner.store.records import close_round
from runner.store.roundfiles import artifact_list, commit_message, describe_patch, store_artifacts
from runner.store.workspace import code_root
from runner.targets.base import Target
from runner.targets.registry import get_target

Progress = Callable[[str], None]

# glibc returns large freed blocks to the OS and page-faults them back on the next
# allocation; every timed call then pays for page faults.  Measured on the CPU demo
# shapes: 40% of the time and a +-20% spread between fresh processes, gone with these
# (+-4%).  Harmless on GPU hosts.  Read by glibc at process start, so set per job.
STEADY_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(1 << 30),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
}
MIN_SIGMA = 1e-6


def now() -> str:
    return now_minute()


@dataclass
class Round:
    """What one round needs while it runs."""

    campaign: Campaign
    executor: Executor
    progress: Progress
    tmp: Path
    round: int
    level: str
    gpus: tuple[int, ...] = ()
    builds: dict[Path, BuiltRole] = field(default_factory=dict)  # tree -> its build

    @property
    def manifest(self) -> Manifest:
        return self.campaign.manifest

    @property
    def target(self) -> Target:
        return get_target(self.manifest.target)

    @property
    def lineage(self) -> Lineage:
        m = self.manifest
        return Lineage(Path(m.source), m.campaign_name, branch_name(m))

    def timing(self) -> TimingSettings:
        fields = self.manifest.timing.model_dump()
        return TimingSettings(cache_mode=self.manifest.cache_mode, **fields)

    def spec(self, role: str, index: int, shapes: list[Shape], **extra: object) -> RoundSpec:
        m = self.manifest
        options = {"granularity": m.granularity, "backend": m.target_backend}
        return RoundSpec(
            campaign=m.campaign_name,
            round=self.round,
            role=role,
            pass_index=index,
            level=self.level,
            target=m.target,
            op=m.target_op,
            options=options,
            shapes=tuple(shapes),
            timing=self.timing(),
            extra=dict(extra),
        )

    def worker_job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> WorkerJob:
        """The job for one worker (a pass, or a serving worker of a paired round), on
        ``tree``'s build (when the target has one) and on its own leased GPU: ``gpu`` (a
        shard's), else the round's only one."""
        spec_path = self.tmp / "specs" / f"{name}.json"
        save_spec(spec_path, spec)
        m = self.manifest
        job_env = {
            **STEADY_MALLOC,
            **self.target.job_env(code_root(tree), m.target_op, m.target_backend),
            **(env or {}),
        }
        if gpu is None and len(self.gpus) == 1:
            gpu = self.gpus[0]
        if gpu is not None and not env:
            job_env.update(gpu_env(gpu, detect_vendor()))
        gpus = () if gpu is None else (gpu,)
        built = self.builds.get(tree)
        self.step(name)
        return WorkerJob(
            name, spec_path, tree, self.tmp / name, env=job_env, built=built, gpus=gpus
        )

    def job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> JobOutcome:
        return self.executor.run_job(self.worker_job(name, spec, tree, env, gpu))

    def step(self, name: str) -> None:
        """Say (and note, for ``campaign status``) which step the round is at."""
        self.progress(f"round-{self.round}: {name}")
        if self.round >= 1:
            note_step(self.campaign.round_dir(self.round), name)


def gpu_lease(
    gpus: Sequence[int], campaign: Campaign, n: int
) -> contextlib.AbstractContextManager[object]:
    """Exclusive leases on the GPUs a round measures on (none: nothing to lease)."""
    if not gpus:
        return contextlib.nullcontext()
    return acquire(list(gpus), campaign.name, round=n)


# ---- shapes --------------------------------------------------------------------------
def all_shapes(m: Manifest) -> list[Shape]:
    if m.target_shapes == "all":
        return shape_set(m.shape_set)
    return shapes_by_label(m.shape_set, m.target_shapes, "target_shapes")


def level_shapes(m: Manifest, level: str) -> list[Shape]:
    """The shapes a round measures: never a held-out one (``campaign accept`` does)."""
    held = set(m.heldout_shapes)
    shapes = [s for s in all_shapes(m) if s.label not in held]
    if level == "full":
        return shapes
    if level != "quick":
        raise ConfigError(f"--level must be quick or full, not {level!r}")
    if not m.representative_shapes:
        raise ConfigError("no representative shapes yet: run `campaign baseline` first")
    chosen = set(m.representative_shapes)
    return [s for s in shapes if s.label in chosen]


# ---- passes --------------------------------------------------------------------------
def run_pass(rnd: Round, role: str, index: int, tree: Path, shapes: list[Shape]) -> Path:
    """One worker pass; returns its CSV or raises RoundFailed with the log tail."""
    name = pass_name(index, role)
    outcome = rnd.job(name, rnd.spec(role, index, shapes), tree)
    if not outcome.ok:
        raise RoundFailed(worker_failure(name, outcome), outcome.log_path)
    return outcome.out_dir / "benchmark.csv"


def run_focused_test(rnd: Round, role: str, tree: Path) -> tuple[bool, str]:
    m = rnd.manifest
    spec = rnd.spec(role, 0, [], mode="test", command=m.test_command)
    outcome = rnd.job(f"test-{role}", spec, tree)
    log = outcome.out_dir / "test.log"
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return outcome.returncode == 0, explain_failure(text[-1500:], text)


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
            return _validate_in(rnd, request, patch, touched, started, diffs)


def _validate_in(
    rnd: Round,
    request: Request,
    patch: str,
    touched: list[str],
    started: str,
    diffs: Sequence[FingerprintDiff],
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
    try:
        with lineage.worktree(head) as inc_tree, lineage.worktree(head, patch) as cand_tree:
            pause_point("candidate-tree")
            snapshot(cand_tree, m.kernel_source, campaign.snapshot_dir(rnd.round))
            vetoes, transfer, report = audit_candidate(
                patch, touched, inc_tree, cand_tree, request.bucket
            )
            write_json_atomic(rnd.tmp / "audit.json", report.to_dict())
            roles = {"incumbent": inc_tree, "candidate": cand_tree}
            with built_roles(rnd, roles, touched) as builds:
                gate, inc_score, cand_score = _measure_and_judge(
                    rnd, request, inc_tree, cand_tree, shapes, vetoes
                )
    except RoundFailed as exc:
        return _close_failed(rnd, request, patch, touched, started, best, str(exc))
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
    ok, tail = run_focused_test(rnd, "candidate", cand_tree)
    if not ok:
        vetoes.append(f"focused test failed on the candidate ({m.test_command}):\n{tail}")
    if vetoes:
        return _veto_only(rnd, vetoes, shapes)
    samples = 2 * (request.pairs or m.pairs)
    trees = {"incumbent": inc_tree, "candidate": cand_tree}
    got = measure_and_judge(rnd, trees, shapes, samples, vetoes=vetoes)
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
        "paired (B C C B) in fresh processes on the same device",
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
        key_finding="worker failed; nothing in the lineage changed",
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
