"""``samples.json``: what a worker recorded per shape besides its CSV row (the raw
timings, the checks, the fresh step, the state probe, its seconds), written by a pass
(``runner.worker.bench.worker_pass.run_spec``) or a serving worker (``runner.worker.bench.serve``),
merged over a sharded pass's shards (``runner.measure.sharding.merge_shard_samples``) and
read by the host for the round's reasons, fresh-step times and sharding costs
(``runner.measure.passes``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TypedDict

from runner.core.artifact_names import SAMPLES


class TimingRecord(TypedDict):
    """One timed callable (``runner.worker.bench.timing_result.Timing.to_dict``)."""

    samples_ms: list[float]
    median_ms: float
    stddev_ms: float
    method: str
    stop_reason: str
    iters_per_sample: int
    extra: dict[str, object]


class CheckRecord(TypedDict):
    """One correctness check of a shape (``runner.worker.ops.base.CheckResult``)."""

    ok: bool
    figures: dict[str, float]
    problems: list[str]


class SimulationRun(TypedDict, total=False):
    """One mode of the 8-step simulation (``runner.worker.cachesim`` ``SimResult.to_dict`` and
    the counts ``runner.worker.bench.statecheck`` adds)."""

    steps: list[dict[str, object]]
    has_weight_cache: bool
    fresh: bool
    passes: int
    problems: list[str]
    state_written_steps: int
    served_steps: int
    mismatched_steps: list[int]


class Simulation(TypedDict, total=False):
    """The 8-step simulation by mode, and what it rejects (``problems``)."""

    fresh: SimulationRun
    activations: SimulationRun
    idiom: SimulationRun
    problems: list[str]


class StateProbe(TypedDict, total=False):
    """``runner.worker.bench.statecheck``: whether a training step wrote kept state, where,
    and the simulation where the op allows it."""

    stateful: bool
    written: list[str]
    simulation: Simulation


class StateReport(TypedDict):
    """One role's kept state over its passes and the simulation of the first shape
    that ran one (``runner.measure.passes.state_report``)."""

    written: list[str]
    simulation: Simulation | None
    shape: str


class ShapeSamples(TypedDict, total=False):
    """One shape's record; a shape that raised has only ``error`` (and what a serving
    worker measured before it did)."""

    forward: TimingRecord
    backward: TimingRecord | None  # None: the op has no backward pass
    fresh_step: TimingRecord | None  # the real-training step
    fresh_draw: TimingRecord | None  # drawing that step's inputs
    state: StateProbe | None  # runner.worker.bench.statecheck
    checks: list[CheckRecord]
    integrity_problems: list[str]  # sampled timed outputs, the 8-step simulation
    seconds: float  # wall time the worker spent on the shape
    # a serving worker on a GPU: seconds it waited to prepare the shape alone on the
    # device (runner.core.prepare_lock), not counted in ``seconds``
    prepare_wait_s: float
    error: str | None


class Samples(TypedDict, total=False):
    """The whole file: the pass's spec, the shapes by label, a serving worker's pool
    size, and for a sharded pass the shard files it was merged from."""

    spec: dict[str, object] | None
    shapes: dict[str, ShapeSamples]
    pool: int
    shards: list[str]


def samples_beside(csv_path: Path) -> Samples | None:
    """The ``samples.json`` beside a pass's CSV; None when the pass left none."""
    path = Path(csv_path).parent / SAMPLES
    if not path.is_file():
        return None
    data: Samples = json.loads(path.read_text(encoding="utf-8"))
    return data
