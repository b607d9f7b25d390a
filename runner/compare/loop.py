"""One measure-and-judge path for every comparison: VALIDATE rounds, final acceptance
and reproduction all measure, shard, re-measure and judge through here.

``measure_roles`` takes independent samples of one or two roles:

* an executor that keeps workers alive (local, docker): paired, turn-taking workers
  (``runner.measure.paired``), one process pair per sample;
* otherwise (slurm): one fresh worker per pass in B C C B order, two samples
  per block; on Slurm with several GPUs the shards go as one job array (one task per
  shard running its passes in order, ``SlurmExecutor.submit_sequences``);
* with several GPUs either way: the shapes split into one shard per GPU, balanced by
  each shape's measured seconds from the baseline (``manifest.shape_seconds``), every
  GPU measuring both roles of its own shapes, the shards merged per pass.

``measure_and_judge`` then merges the passes of each role, scores them, pairs them,
judges with the gate and, while the gate asks for more paired samples
(``gate.required_pairs``), measures more pairs and judges again.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

from runner.compare.shapes import level_shapes
from runner.core.artifact_names import BENCHMARK_CSV, EMPIRICAL_PEAK, INCUMBENT_CSV
from runner.core.csv_schema import BenchCSV
from runner.core.empirical_peak import EmpiricalPeak
from runner.core.errors import MeasurementFailed
from runner.core.files import read_json
from runner.core.op_info import op_info
from runner.core.outcomes import Decision, GateResult, Score
from runner.core.shapes import Shape
from runner.executors.base import SequenceExecutor
from runner.judge.gate import promising, required_pairs
from runner.judge.heldout import heldout_verdict
from runner.judge.independent import decide_metrics
from runner.judge.measuring_caps import CAP_PAIRS, MAX_PAIRS, PROMISING_PAIRS, ROUND_CAP_S
from runner.judge.probe import GUARD, is_probe
from runner.judge.scoring import component_metrics, score
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.measure.host import Host, run_job
from runner.measure.paired import (
    measure_paired,
    supports_paired,
    turns_per_worker,
    worker_timeout,
)
from runner.measure.passes import (
    check_problems,
    fresh_gains,
    light_readings,
    pair_gain,
    pair_samples,
    read_passes,
    write_merged,
)
from runner.measure.progress import PairWatch, fmt_seconds, pair_seconds
from runner.measure.sharding import (
    BCCB,
    detect_vendor,
    failed_worker,
    gpu_env,
    measure_sharded,
    merge_passes,
    pass_name,
    run_sharded,
    seconds_cost,
    shard_shapes,
)
from runner.render.figures import fmt_gain

if TYPE_CHECKING:  # compare sits below the round: a RoundPlan is only handed in
    from runner.round.context import RoundPlan

# How long one comparison may measure: the caps are gate constants
# (runner.judge.measuring_caps); a host or a test suite may set the seconds (then
# exactly those, without the pair floor).
ROUND_CAP_ENV = "TURBO_CAMPAIGN_ROUND_CAP_S"


class MeasuredManifest(Protocol):
    """The manifest fields the measuring reads: the pinned CSV header, the metric a
    pair's reading is scored by, the baseline's seconds per shape (shards balanced by
    them, the first estimate of the time left)."""

    @property
    def pinned_header(self) -> str | None: ...

    @property
    def primary_metric(self) -> str: ...

    @property
    def shape_seconds(self) -> Mapping[str, float]: ...


class MeasurePlan(Host, Protocol):
    """What ``measure_roles`` measures through: the engine's ``Host``, and of the
    round its number (in its progress lines and the turn order's seed), level (the cap
    its progress estimates against), GPUs (several: one shard of the shapes each), its
    progress and manifest.  A campaign's ``runner.round.context.RoundPlan`` is one;
    benchmarks and tests hand a ``runner.measure.host.PlainHost``."""

    @property
    def round(self) -> int: ...

    @property
    def level(self) -> str: ...

    @property
    def gpus(self) -> tuple[int, ...]: ...

    @property
    def manifest(self) -> MeasuredManifest: ...

    def progress(self, message: str) -> None: ...


# ---- measuring -----------------------------------------------------------------------
def measure_roles(
    rnd: MeasurePlan,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    samples: int,
    start_index: int = 0,
    watch: PairWatch | None = None,
    beside: BesideWork = NOTHING_BESIDE,
) -> dict[str, list[Path]]:
    """``samples`` independent samples of the roles of ``trees`` (in their order; one
    role: that many passes of it, two roles: that many pairs).  Returns per role the
    pinned CSV of each pass, pass i of one role paired with pass i of the other.
    ``watch`` (default: a new one) says the pairs planned, each turn and pair done.
    ``beside``: the work beside serving workers (``runner.measure.beside``); passes of
    fresh processes take none of it (a focused test ran before them, at once)."""
    roles = list(trees)
    watch = watch or pair_watch(rnd, roles, shapes)
    watch.plan(samples)
    if supports_paired(rnd.executor):
        return _paired(rnd, trees, shapes, roles, samples, start_index, watch, beside)
    return _per_pass(rnd, trees, shapes, roles, samples, start_index, watch)


def _paired(
    rnd: MeasurePlan,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    roles: list[str],
    samples: int,
    start_index: int,
    watch: PairWatch,
    beside: BesideWork,
) -> dict[str, list[Path]]:
    gpus = tuple(rnd.gpus)
    seed = 7919 * rnd.round + start_index
    if len(gpus) <= 1:
        env = gpu_env(gpus[0], detect_vendor()) if gpus else None
        return measure_paired(
            rnd,
            trees,
            shapes,
            roles,
            pairs=samples,
            start_index=start_index,
            env=env,
            seed=seed,
            watch=watch,
            beside=beside,
        )
    shards = [s for s in shard_shapes(shapes, len(gpus), cost=_cost(rnd)) if s]
    used = gpus[: len(shards)]
    vendor = detect_vendor()
    rnd.progress(
        f"round-{rnd.round}: {len(shards)} shard(s) on GPUs {list(used)}: "
        + "; ".join(f"GPU {g}: {len(s)} shape(s)" for g, s in zip(used, shards, strict=True))
    )

    def one(k: int, gpu: int) -> list[Path]:
        """Shard k's CSVs in pass order (pair by pair, the roles in order)."""
        got = measure_paired(
            rnd,
            trees,
            shards[k],
            roles,
            pairs=samples,
            start_index=start_index,
            env=gpu_env(gpu, vendor),
            suffix=f"-gpu{gpu}",
            seed=seed,
            beside=beside,
        )
        return [got[role][p] for p in range(samples) for role in roles]

    per_shard = run_sharded(one, used)
    passes = [
        (start_index + i, role)
        for i, role in enumerate((r for _ in range(samples) for r in roles), start=1)
    ]
    order = [s.label for s in shapes]
    return merge_passes(rnd.tmp, passes, per_shard, order, rnd.manifest.pinned_header)


def _per_pass(
    rnd: MeasurePlan,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    roles: list[str],
    samples: int,
    start_index: int,
    watch: PairWatch,
) -> dict[str, list[Path]]:
    """One fresh worker per pass: B C C B blocks (two samples each), C B for an odd
    one (more roles: their palindrome, B C D D C B, the candidates rotated from block to
    block as ``paired._order`` rotates them); one role: ``samples`` passes."""
    patterns = pass_patterns(roles, samples, start_index)
    gpus = tuple(rnd.gpus)
    if len(gpus) > 1 and isinstance(rnd.executor, SequenceExecutor):
        return _slurm_array(rnd, trees, shapes, roles, patterns, start_index)
    paths: dict[str, list[Path]] = {role: [] for role in roles}
    index = start_index
    for pattern in patterns:
        if len(gpus) > 1:
            got = measure_sharded(
                rnd,
                trees,
                shapes,
                gpus,
                pattern=pattern,
                blocks=1,
                start_index=index,
                pinned=rnd.manifest.pinned_header,
                cost=_cost(rnd),
            )
            for role in roles:
                paths[role] += got.get(role, [])
            index += len(pattern)
            continue
        for role in pattern:
            index += 1
            paths[role].append(_run_pass(rnd, role, index, trees[role], shapes))
        for _ in range(len(pattern) // len(roles)):
            watch.pair_done()
    return paths


def pass_patterns(
    roles: Sequence[str], samples: int, start_index: int = 0
) -> list[tuple[str, ...]]:
    """The blocks of fresh-process passes giving ``samples`` samples of each role: B C C
    B (two samples each) and C B for an odd one; more roles: their palindrome B C D D C
    B, the candidates rotated from block to block (from ``start_index``) as
    ``paired._order`` rotates them; one role: ``samples`` passes."""
    if len(roles) == 1:
        return [(roles[0],)] * samples
    patterns: list[tuple[str, ...]] = []
    cands = list(roles[1:])
    for block in range((samples + 1) // 2):
        r = (start_index + block) % len(cands)
        forward = (roles[0], *cands[r:], *cands[:r])
        back = tuple(reversed(forward))
        patterns.append((*forward, *back) if 2 * block + 1 < samples else back)
    return patterns


def _slurm_array(
    rnd: MeasurePlan,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    roles: list[str],
    patterns: list[tuple[str, ...]],
    start_index: int,
) -> dict[str, list[Path]]:
    """Shards as one Slurm job array: one array task per shard runs that shard's
    passes in order in its one allocation (the scheduler gives each task its GPU), all
    shards at once; then the shard CSVs of each pass are merged."""
    n = len(rnd.gpus)
    shards = [s for s in shard_shapes(shapes, n, cost=_cost(rnd)) if s]
    passes = [
        (start_index + i, role)
        for i, role in enumerate((r for pattern in patterns for r in pattern), start=1)
    ]
    rnd.progress(f"round-{rnd.round}: {len(shards)} shard(s) as one Slurm job array")
    sequences = [
        [
            rnd.worker_job(
                f"{pass_name(i, role)}-shard{k}",
                rnd.template.for_pass(role, i, shard),
                trees[role],
                {"TURBO_CAMPAIGN_SHARD": str(k)},
            )
            for i, role in passes
        ]
        for k, shard in enumerate(shards)
    ]
    assert isinstance(rnd.executor, SequenceExecutor)
    outcomes = rnd.executor.submit_sequences(sequences, rnd.tmp)
    for seq in outcomes:
        for outcome in seq:
            if not outcome.ok:
                raise failed_worker(outcome.name, outcome)
    per_shard = [[Path(o.out_dir) / BENCHMARK_CSV for o in seq] for seq in outcomes]
    order = [s.label for s in shapes]
    return merge_passes(rnd.tmp, passes, per_shard, order, rnd.manifest.pinned_header)


def _run_pass(rnd: MeasurePlan, role: str, index: int, tree: Path, shapes: list[Shape]) -> Path:
    name = pass_name(index, role)
    with rnd.times.step("passes"):
        outcome = run_job(rnd, name, rnd.template.for_pass(role, index, shapes), tree)
    if not outcome.ok:
        raise failed_worker(name, outcome)
    return Path(outcome.out_dir) / BENCHMARK_CSV


def _cost(rnd: MeasurePlan) -> Callable[[Shape], float]:
    return seconds_cost(rnd.manifest.shape_seconds)


def pair_watch(rnd: MeasurePlan, roles: Sequence[str], shapes: Sequence[Shape]) -> PairWatch:
    """The progress of one comparison of ``roles`` on ``shapes`` in ``rnd``: the
    baseline's seconds per shape give the first estimate; a pair's reading is its
    gain (two roles)."""
    m = rnd.manifest
    prior = pair_seconds(m.shape_seconds, [s.label for s in shapes], len(roles))
    if len(rnd.gpus) > 1 and prior is not None:
        prior /= len(rnd.gpus)  # the shards measure side by side
    reading = None
    if len(roles) == 2:
        pinned, metric = m.pinned_header, m.primary_metric
        reading = partial(pair_gain, pinned=pinned, metric=metric)
    cap = measurement_cap(rnd.level) if len(roles) == 2 else Cap(0.0)
    return PairWatch(
        rnd.progress,
        f"round-{rnd.round}",
        roles=len(roles),
        turns_per_pair=len(roles) * turns_per_worker(roles, 1),
        prior_s=prior,
        cap_s=cap.seconds or None,
        cap_pairs=cap.pairs,
        cap_promising=cap.promising,
        reading=reading,
    )


# ---- judging -------------------------------------------------------------------------
@dataclass
class Judged:
    """A finished comparison: the verdict, both merged scores, every pass."""

    gate: GateResult
    reference: Score
    candidate: Score
    paths: dict[str, list[Path]]
    csvs: dict[str, list[BenchCSV]]


@dataclass(frozen=True)
class Comparison:
    """How one caller names and audits its comparison.

    ``roles``: the reference role, then the candidate role (``trees`` keys);
    ``files``: where their merged CSVs go in ``rnd.tmp``; ``broken``: the message when
    the reference FAILs a check; ``audits``: the round-only audits (held-out flag,
    inflation veto) apply; ``targeted``: the shapes a targeted round is judged on
    (Rule 3's exception, docs/protocol.md §5.4; empty: every shape)."""

    roles: tuple[str, str] = ("incumbent", "candidate")
    files: tuple[str, str] = (INCUMBENT_CSV, BENCHMARK_CSV)
    broken: str = "the incumbent FAILed a correctness check: the lineage head is broken"
    audits: bool = True
    targeted: tuple[str, ...] = ()


def measure_and_judge(
    rnd: RoundPlan,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    samples: int,
    *,
    how: Comparison = Comparison(),
    vetoes: Sequence[str] = (),
    remeasure: bool = True,
    measured: Mapping[str, list[Path]] | None = None,
    settled: Callable[[GateResult], bool] | None = None,
    beside: BesideWork = NOTHING_BESIDE,
) -> Judged:
    """Measure ``samples`` incumbent/candidate pairs (``core.limits.block_pairs`` of the
    blocks a user asks for), judge, and while the gate asks for more paired samples,
    measure the fresh pairs it asks for and judge again: sequential
    measurement that stops as soon as the verdict is clear, either way.  The round's
    measurement cap (``measurement_cap``: seconds by level, and MAX_PAIRS) ends it; the
    last judgement is then final (what is still unclear rolls back as too volatile to
    tell, naming the noise measured).  ``measured``: passes of both roles already taken
    (e.g. in a session with more roles); then only the extra pairs are measured here.
    ``settled``: a judgement still asking for pairs that it holds enough ends the
    measurement too (a tournament's confirmation, ``runner.judge.gate.confirms``); the
    caller reads what it means.  ``beside``: handed to every measurement here
    (``measure_roles``)."""
    ordered = {role: trees[role] for role in how.roles}
    started = time.monotonic()
    watch = pair_watch(rnd, how.roles, shapes)  # the pairs measured here
    if measured is not None:
        paths = {role: list(measured[role]) for role in how.roles}
    else:
        # after the passes of an earlier measurement in this round (a quick acceptance
        # confirmed at the full level): their folders and records stay as the host wrote them
        first = first_samples(rnd, samples, remeasure)
        paths = measure_roles(rnd, ordered, shapes, first, last_index(rnd.tmp), watch, beside)
    judged = judge(rnd, paths, how, vetoes, final=not remeasure)
    looks = [judged.gate.pairs_used]
    cap = measurement_cap(getattr(rnd, "level", "full"))
    while judged.gate.decision is Decision.NEEDS_REMEASURE:
        if settled is not None and settled(judged.gate):
            break
        have = len(paths[how.roles[1]])
        more = next_pairs(
            judged.gate.more_pairs, have, time.monotonic() - started, cap, promising(judged.gate)
        )
        if more < 1:
            rnd.progress(
                f"round-{rnd.round}: measurement cap reached at {have} pair(s), "
                f"{fmt_seconds(time.monotonic() - started)} measured"
            )
            judged = judge(rnd, paths, how, vetoes, final=True)
            break
        rnd.progress(
            f"round-{rnd.round}: not clear yet ({_evidence_line(judged.gate)}): {more} more pair(s)"
        )
        _measure_more(rnd, ordered, shapes, more, paths, watch, beside)
        judged = judge(rnd, paths, how, vetoes)
        looks.append(judged.gate.pairs_used)
    return with_looks(judged, looks)


def _measure_more(
    rnd: RoundPlan,
    ordered: Mapping[str, Path],
    shapes: list[Shape],
    more: int,
    paths: dict[str, list[Path]],
    watch: PairWatch,
    beside: BesideWork,
) -> None:
    """Measure ``more`` fresh pairs after the passes in ``paths`` and add them there."""
    got = measure_roles(rnd, ordered, shapes, more, last_index(rnd.tmp), watch, beside)
    for role in ordered:
        paths[role] += got[role]


def with_looks(judged: Judged, looks: list[int]) -> Judged:
    """``judged`` with the pair counts its gate looked at (each once, in order; the
    final judgement at the cap reads the pairs of the look before it), for the
    false-accept bound (``runner.judge.false_accept``)."""
    seen = tuple(n for i, n in enumerate(looks) if n > 0 and n not in looks[:i])
    return replace(judged, gate=replace(judged.gate, looks=seen))


class Cap(NamedTuple):
    """How long one comparison may measure: ``seconds`` (start-up included), but never
    fewer than ``pairs`` pairs however long they take, ``promising`` pairs while the
    paired gain's interval lies above 1% (``runner.judge.gate.promising``)."""

    seconds: float
    pairs: int = 0
    promising: int = 0


def measurement_cap(level: str) -> Cap:
    """A comparison's cap: ROUND_CAP_S by level and at least CAP_PAIRS pairs, or
    exactly the seconds ``TURBO_CAMPAIGN_ROUND_CAP_S`` names (a host or a test suite
    that sets them means them: no pair floor)."""
    if os.environ.get(ROUND_CAP_ENV, "").strip():
        return Cap(worker_timeout(ROUND_CAP_ENV, 0.0))
    return Cap(ROUND_CAP_S.get(level, ROUND_CAP_S["full"]), CAP_PAIRS, PROMISING_PAIRS)


def next_pairs(asked: int, have: int, elapsed_s: float, cap: Cap, promising: bool = False) -> int:
    """The fresh pairs to measure next: what the gate asked for, no more than fit in
    the cap's time left at the rate measured so far (start-up included), or up to its
    pair floor (its ``promising`` floor for a gain whose interval lies above 1%), and in
    MAX_PAIRS; 0 when none fits (the judgement is then final)."""
    per_pair = elapsed_s / max(have, 1)
    room = math.floor((cap.seconds - elapsed_s) / per_pair) if per_pair > 0 else asked
    room = max(room, (cap.promising if promising else cap.pairs) - have)
    return max(0, min(max(asked, 1), room, MAX_PAIRS - have))


def _evidence_line(gate: GateResult) -> str:
    if gate.evidence is None:
        return f"{gate.pairs_used} pair(s)"
    return f"paired gain {fmt_gain(gate.evidence.gain.mean_pct, gate)}"


def pairing_words(executor: object) -> str:
    """How incumbent and candidate were interleaved, in the words of the records."""
    if supports_paired(executor):
        return (
            "paired in A B B A turns of long-lived workers (A the incumbent, B the "
            "candidate; one worker pair per sample)"
        )
    return "paired in B C C B passes of fresh processes (B the incumbent, C the candidate)"


def first_samples(rnd: RoundPlan, samples: int, remeasure: bool = True) -> int:
    """The pairs to start a comparison with.  A quick round on a GPU with paired
    workers starts every pair the near-noise rule may ask for (``required_pairs``) at
    once: its turns are short, so a second set of workers (start-up, compile, first
    calls, the fresh step at the end) would cost more than the turns it saves.
    Otherwise ``samples``, and more only when the gate asks."""
    if remeasure and rnd.quick_gpu and supports_paired(rnd.executor):
        return max(samples, required_pairs(rnd.manifest.sigma_g))
    return samples


def last_index(tmp: Path) -> int:
    """The highest pass number used in ``tmp`` (``pass-NN-<role>[...]`` folders)."""
    numbers = [int(p.name.split("-")[1]) for p in tmp.glob("pass-*-*") if p.is_dir()]
    return max(numbers, default=0)


def empirical_peak(root: Path) -> EmpiricalPeak | None:
    """The campaign's empirical peak (``EMPIRICAL_PEAK`` in its root), if measured."""
    doc = read_json(root / EMPIRICAL_PEAK)
    return EmpiricalPeak.from_dict(doc) if isinstance(doc, dict) else None


def judge(
    rnd: RoundPlan,
    paths: Mapping[str, list[Path]],
    how: Comparison,
    vetoes: Sequence[str],
    *,
    final: bool = False,
) -> Judged:
    """Merge, score, pair and gate the passes measured so far (``final``: no more
    pairs will come)."""
    with rnd.times.step("judge"):
        return _judge(rnd, paths, how, vetoes, final)


def _judge(
    rnd: RoundPlan,
    paths: Mapping[str, list[Path]],
    how: Comparison,
    vetoes: Sequence[str],
    final: bool,
) -> Judged:
    from runner.judge.vetoes import heldout_flag, inflation_veto, speed_of_light_veto

    m = rnd.manifest
    ref_role, cand_role = how.roles
    ref = read_passes(paths[ref_role], m.pinned_header)
    cand = read_passes(paths[cand_role], m.pinned_header)
    merged = write_merged(rnd.tmp / how.files[0], ref), write_merged(rnd.tmp / how.files[1], cand)
    # several metrics: independent metrics, docs/protocol.md §5.9
    metrics = component_metrics(m.primary_metric)
    refs = {k: score(merged[0], k) for k in metrics}
    cands = {k: score(merged[1], refs[k].metric) for k in metrics}
    ref_score, cand_score = refs[metrics[0]], cands[metrics[0]]
    if ref_score.n_fail:
        raise MeasurementFailed(how.broken)
    pairs = {k: pair_samples(ref, cand, refs[k].metric) for k in metrics}
    if how.audits:  # a candidate's rate above its GPU's peak: a measuring error, vetoed
        readings = light_readings(cand, op_info(m.target_op).precision, ref)
        light = speed_of_light_veto(readings, empirical_peak(rnd.campaign.root))
        vetoes = [*vetoes, light] if light else vetoes
    gate = decide_metrics(
        refs,
        cands,
        sigma_g=m.sigma_g,
        pairs=pairs,
        vetoes=list(vetoes),
        final=final,
        targeted_shapes=how.targeted,
    )
    if cand_score.n_fail:
        why = tuple(f"candidate check: {p}" for p in check_problems(paths[cand_role]))
        gate = replace(gate, reasons=(*gate.reasons, *why))
    if how.audits:
        gate = heldout_flag(gate, m.heldout_shapes)
        gain = fresh_gains(paths[ref_role], paths[cand_role])
        inflated = inflation_veto(gate, gain, m.sigma_g or 0.0)
        late = [v for v in (inflated, probe_veto(rnd, ref_score, cand_score, gate)) if v]
        if late:
            gate = decide_metrics(
                refs,
                cands,
                sigma_g=m.sigma_g,
                pairs=pairs,
                vetoes=[*vetoes, *late],
                final=final,
                targeted_shapes=how.targeted,
            )
        gate = name_probe(gate)
    csvs = {ref_role: ref, cand_role: cand}
    return Judged(gate, ref_score, cand_score, {k: list(v) for k, v in paths.items()}, csvs)


def name_probe(gate: GateResult) -> GateResult:
    """A probe shape the gate's own per-shape rule refused (it regressed) named as
    the unannounced-shape guard's finding, first among the reasons."""
    if gate.decision.accepted or any(r.startswith(GUARD) for r in gate.reasons):
        return gate
    hit = [
        s.label
        for s in gate.shapes
        if is_probe(s.label) and any(s.label in r for r in gate.reasons)
    ]
    if not hit:
        return gate
    note = (
        f"{GUARD}: the candidate lost on {hit[0]}, a shape no file listed before the "
        "round: a change tuned to the listed shapes (docs/protocol.md §5.7)"
    )
    return replace(gate, reasons=(note, *gate.reasons))


def probe_veto(rnd: RoundPlan, ref: Score, cand: Score, gate: GateResult) -> str | None:
    """The unannounced-shape guard (``runner.judge.probe``): a quick round's probe
    shape judged against the listed shapes by the held-out rule of final acceptance
    (``runner.judge.heldout.heldout_verdict``); the veto's words, or None."""
    probe = rnd.probe
    if probe is None or probe.label not in ref.by_label() or not gate.decision.accepted:
        return None
    work = {s.label: s.flops_fwd for s in [*level_shapes(rnd.manifest, rnd.level), probe]}
    verdict = heldout_verdict(ref, cand, [probe.label], work, gate)
    if verdict is None or verdict[0]:
        return None
    return (
        f"{GUARD}: the gain does not hold on {probe.label}, a shape no file listed before "
        f"the round (its M moved from {probe.params.get('probe_of')}): a change tuned to "
        f"the listed shapes (docs/protocol.md §5.7): {verdict[1]}"
    )


__all__ = [
    "BCCB",
    "Comparison",
    "Judged",
    "first_samples",
    "measure_and_judge",
    "measure_roles",
    "pairing_words",
    "with_looks",
]
