"""One worker pass: the target imported from the measured tree (its provenance proven),
then every shape of the spec checked on fresh seeded inputs, timed forward and backward
by the timing engine, and checked again after timing; ``benchmark.csv`` (the pinned
schema), ``samples.json`` (raw per-batch times and correctness figures) and
``meta.json`` (device and versions) written into the pass's folder.  A shape that
raises still gets a row (Check=FAIL, numbers nan).  The serving worker of a paired
round (``runner.worker.bench.serve``) measures with the same parts.

Worker-side: imports torch, never pydantic.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, TypedDict

import runner.worker.bench.gpu  # noqa: F401  (imported before the target: its bindings are guarded)
from runner.core.artifact_names import BENCHMARK_CSV, META, SAMPLES
from runner.core.files import write_json_atomic
from runner.core.profile_range import profiled_region
from runner.core.samples import Samples, ShapeSamples
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec
from runner.worker.bench.environment import environment_meta
from runner.worker.bench.gpu import plain_launches
from runner.worker.bench.integrity import BindingGuard, OutputSampler
from runner.worker.bench.oom import DeviceMemoryExhausted, out_of_memory, release_cached
from runner.worker.bench.provenance import check_provenance, record_loaded
from runner.worker.bench.rows import ROW_BUILDERS, failed_row
from runner.worker.bench.statecheck import StateRecord, stateful_probe
from runner.worker.bench.timing import Timing, measure

if TYPE_CHECKING:
    from collections.abc import Mapping

    from runner.worker.ops.base import Case, CheckResult, FreshStep, OpAdapter

log = logging.getLogger("runner.worker")


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def pin_cpu_threads() -> None:
    """CPU passes run single-threaded: the CPU-time clock then measures exactly the
    work of the op, and two workers never fight over the same cores."""
    import torch

    torch.set_num_threads(1)


class ShapeResult(TypedDict):
    """One shape measured by a pass: its CSV row, its raw record, its problems."""

    row: dict[str, object]
    raw: ShapeSamples
    problems: list[str]


def measure_shape(adapter: OpAdapter, shape: Shape, spec: RoundSpec, device: str) -> ShapeResult:
    """Check, time, re-check one shape; return its CSV row and raw record.

    The timed closures run through ``OutputSampler``s (``time_case``); then
    ``after_timing`` times the real-training step, runs the state probe and the
    re-check.  The paired workers (``runner.worker.bench.serve``) use the same two parts."""
    checks = [adapter.check(shape, device, spec.seed + 1000 * i) for i in range(spec.check_seeds)]
    release_cached(device)  # the checks' float32 references, dropped before the timed case
    case = adapter.case(shape, device, spec.seed)
    fwd, bwd, timed_problems = time_case(case, spec, device)
    moved = {"fwd_bytes": case.fwd_bytes, "bwd_bytes": case.bwd_bytes}
    del case  # free the timed tensors before the fresh-step measurement
    problems, figures, raw = after_timing(adapter, shape, spec, device, checks, timed_problems)
    build = ROW_BUILDERS[adapter.info.schema]
    row = build(shape, fwd, bwd, moved, figures, not problems)
    raw = {"forward": fwd.to_dict(), "backward": bwd.to_dict() if bwd else None, **raw}
    return {"row": row, "raw": raw, "problems": problems}


def time_case(
    case: Case, spec: RoundSpec, device: str, slots: Mapping[str, object] | None = None
) -> tuple[Timing, Timing | None, list[str]]:
    """Forward and backward timed through ``OutputSampler``s: every timed call's outputs
    must be plain finished tensors (``finished``: the finished-output guard), and a few
    timed calls, chosen at random after they returned, are judged against the reference
    (a shortcut taken only while timed FAILs the shape); on a GPU a graph replay must
    follow a negated input (``runner.worker.bench.replay_check``).  ``slots``: per kind
    ("forward", "backward") the ``CaptureSlot`` the case shares with its shape's other
    pool members.  Returns (forward, backward or None, problems)."""
    from runner.worker.ops.base import finished

    slots = slots or {}
    problems: list[str] = []
    fwd_calls = OutputSampler(
        case.forward,
        finish=lambda out: finished(out, "timed forward"),
        flip=case.flips.get("forward"),
        slot=slots.get("forward"),
    )
    with profiled_region(device):
        fwd = measure(fwd_calls, spec.timing, device)
    problems += fwd_calls.problems(case.verify, "forward")
    bwd = None
    if case.backward:
        bwd_calls = OutputSampler(
            case.backward,
            finish=lambda out: finished(out, "timed backward"),
            flip=case.flips.get("backward"),
            slot=slots.get("backward"),
        )
        with profiled_region(device):
            bwd = measure(bwd_calls, spec.timing, device)
        problems += bwd_calls.problems(case.verify, "backward")
    return fwd, bwd, problems


class FreshTimes(NamedTuple):
    """The real-training step's timing and its input draw's (None without one)."""

    step: Timing | None
    draw: Timing | None


def fresh_timing(adapter: OpAdapter, shape: Shape, spec: RoundSpec, device: str) -> FreshTimes:
    """The timed part of ``after_timing``: the real-training step (fresh values, new
    buffers, a weight update) and the drawing of its inputs apart, each timed; its
    tensors are dropped again.  ``(None, None)`` for an op without a fresh step."""
    if not hasattr(adapter, "fresh_step"):
        return FreshTimes(None, None)
    step = adapter.fresh_step(shape, device, spec.seed)
    unreplayed(step)
    timed = measure(step.step, spec.timing, device)
    return FreshTimes(timed, measure(step.draw, spec.timing, device))


def unreplayed(step: FreshStep) -> None:
    """The real-training step and its draw timed with plain launches: every call draws
    new values on new buffers, which a graph replay would fix (and their capture fails
    on the draw's generator): no capture is tried and no side-stream check is run
    (``runner.worker.bench.gpu.plain_launches``)."""
    why = "the real-training step draws new values on new buffers every call: plain launches"
    plain_launches(step.step, why)
    plain_launches(step.draw, why)


def after_timing(
    adapter: OpAdapter,
    shape: Shape,
    spec: RoundSpec,
    device: str,
    checks: list[CheckResult],
    timed_problems: list[str],
    timed: FreshTimes | None = None,
) -> tuple[list[str], dict[str, float], ShapeSamples]:
    """After the idiom's timing: the real-training step (fresh values, new buffers, a
    weight update) timed, and the cost of drawing its inputs apart; the 8-step
    simulation when the op keeps state between calls; the re-check on new inputs.
    ``timed``: the step was timed already (``fresh_timing``, in a CPU worker's turn of
    its own); the state probe then runs on a new step.
    Returns (problems, worst figures, raw record fields)."""
    fresh = draw = None
    state: StateRecord | None = None
    if hasattr(adapter, "fresh_step"):
        step = adapter.fresh_step(shape, device, spec.seed)
        state = stateful_probe(adapter, shape, device, spec, step.step)
        if timed is None:
            unreplayed(step)
            fresh = measure(step.step, spec.timing, device)
            draw = measure(step.draw, spec.timing, device)
        del step
    if timed is not None:
        fresh, draw = timed
    checks = [*checks, adapter.check(shape, device, spec.seed + 7919)]
    integrity = list(timed_problems)
    simulation = state.get("simulation") if state else None
    if isinstance(simulation, dict) and simulation.get("problems"):
        integrity += [f"8-step simulation: {p}" for p in simulation["problems"]]
    problems = [p for c in checks for p in c.problems] + integrity
    figures = {k: _worst(k, [c.figures[k] for c in checks]) for k in checks[0].figures}
    raw: ShapeSamples = {
        "fresh_step": fresh.to_dict() if fresh else None,
        "fresh_draw": draw.to_dict() if draw else None,
        "state": state,
        "checks": [{"ok": c.ok, "figures": c.figures, "problems": c.problems} for c in checks],
        "integrity_problems": integrity,  # sampled timed outputs, the 8-step simulation
    }
    return problems, figures, raw


def _worst(key: str, values: list[float]) -> float:
    """The worst figure over the checks: the lowest SNR, the largest error."""
    return max(values) if key == "max_abs_err" else min(values)


class Loaded(NamedTuple):
    """What a worker measures with: the op adapter, the device, and the guard over the
    harness bindings (taken before the target was imported)."""

    adapter: OpAdapter
    device: str
    guard: BindingGuard


def load_for(spec: RoundSpec, out_dir: Path) -> Loaded:
    """The op adapter over the target imported from the measured tree (its provenance
    proven and recorded in ``out_dir``), the device, and the binding guard."""
    from runner.targets.registry import get_target
    from runner.worker.ops.base import load_adapter

    device = resolve_device(spec.device)
    if device == "cpu":
        pin_cpu_threads()
    guard = BindingGuard()  # before the target is imported: the bindings it must not touch
    target = get_target(spec.target)
    api = target.load_api()
    check_provenance(target, api, out_dir)
    adapter = load_adapter(spec.op, api, spec.options)
    record_loaded(out_dir, spec.role, "load")  # the end of the pass records them again
    return Loaded(adapter, device, guard)


OUT_OF_MEMORY_EXIT = 6  # a pass whose device ran out of memory (the record says where)


def _ran_out_of_memory(exc: BaseException, shape: Shape, out_dir: Path) -> bool:
    """True, with the record left in ``out_dir`` and logged, when ``exc`` is the device
    running out of memory (``runner.worker.bench.serve.out_of_memory``): the pass stops there,
    an infrastructure failure, never a FAIL row read as a wrong result."""
    try:
        out_of_memory(exc, shape.label, out_dir)
    except DeviceMemoryExhausted as oom:
        log.error("shape %s: %s", shape.label, oom)
        return True
    return False


def run_spec(spec: RoundSpec, out_dir: Path) -> int:
    """Measure every shape of ``spec`` into ``out_dir``; return the process exit code."""
    from runner.core.csv_io import write_csv
    from runner.core.csv_schema import get_schema

    adapter, device, guard = load_for(spec, out_dir)
    schema = get_schema(adapter.info.schema)
    rows: list[dict[str, object]] = []
    raw: dict[str, ShapeSamples] = {}
    for shape in spec.shapes:
        t0 = time.perf_counter()
        try:
            guard.verify()
            result = measure_shape(adapter, shape, spec, device)
            guard.verify()  # a binding replaced while this shape ran voids its timings
        except Exception as exc:  # a shape that raised still gets a FAIL row
            if _ran_out_of_memory(exc, shape, out_dir):
                return OUT_OF_MEMORY_EXIT  # no CSV: no FAIL row for the device's capacity
            log.error("shape %s raised: %s\n%s", shape.label, exc, traceback.format_exc())
            rows.append(failed_row(shape, schema.name, schema.columns))
            raw[shape.label] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        rows.append(result["row"])
        raw[shape.label] = {**result["raw"], "seconds": round(time.perf_counter() - t0, 4)}
        for problem in result["problems"]:
            log.error("shape %s failed a check: %s", shape.label, problem)
        log.info(
            "shape %s: %s in %.1f s", shape.label, result["row"]["Check"], time.perf_counter() - t0
        )
    samples: Samples = {"spec": spec.to_dict(), "shapes": raw}
    write_json_atomic(out_dir / SAMPLES, samples)
    write_json_atomic(out_dir / META, environment_meta(device).to_dict())
    record_loaded(out_dir, spec.role, "end")
    write_csv(out_dir / BENCHMARK_CSV, schema, rows)
    return 0
