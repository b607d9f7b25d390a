"""The worker: ``python -m runner.worker SPEC.json OUT_DIR`` (one pass), or
``python -m runner.worker --serve SPEC.json OUT_DIR`` (a long-lived paired worker that
measures when the host hands it the device: ``runner.bench.serve``).

Runs inside the isolated environment (a fresh subprocess, container or Slurm task).
For every shape of the spec it checks correctness on fresh seeded inputs, times
forward and backward with the timing engine, checks correctness again after timing,
and writes into OUT_DIR: ``benchmark.csv`` (the pinned schema), ``samples.json`` (raw
per-batch times and correctness figures), ``meta.json`` (device and versions) and
``worker.log``.  A shape that raises still gets a row (Check=FAIL, numbers nan).
Speaks to the host only through these files.  Imports torch; never pydantic.
"""

from __future__ import annotations

import json
import logging
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any, NamedTuple

import runner.bench.gpu  # noqa: F401  (imported before the target: its bindings are guarded)
from runner.bench.integrity import BindingGuard, OutputSampler
from runner.bench.statecheck import stateful_probe
from runner.bench.timing import measure
from runner.core.lifeline import child_preexec
from runner.core.pause_points import pause_point
from runner.core.shapes import Shape
from runner.core.spec import OUT_ENV, RoundSpec, load_spec, write_json_atomic
from runner.rows import ROW_BUILDERS, failed_row

log = logging.getLogger("runner.worker")
NAN = float("nan")


def resolve_device(requested: str) -> str:
    import torch

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return requested


def pin_cpu_threads(spec: RoundSpec) -> None:
    """CPU passes run single-threaded (``extra.cpu_threads`` overrides): the CPU-time
    clock then measures exactly the work of the op, and two workers never fight over
    the same cores."""
    import torch

    torch.set_num_threads(int(spec.extra.get("cpu_threads", 1)))


def measure_shape(adapter: Any, shape: Shape, spec: RoundSpec, device: str) -> dict[str, Any]:
    """Check, time, re-check one shape; return its CSV row and raw record.

    The timed closures run through ``OutputSampler``s (``time_case``); then
    ``after_timing`` times the real-training step, runs the state probe and the
    re-check.  The paired workers (``runner.bench.serve``) use the same two parts."""
    checks = [adapter.check(shape, device, spec.seed + 1000 * i) for i in range(spec.check_seeds)]
    case = adapter.case(shape, device, spec.seed)
    fwd, bwd, timed_problems = time_case(case, spec, device)
    moved = {"fwd_bytes": case.fwd_bytes, "bwd_bytes": case.bwd_bytes}
    del case  # free the timed tensors before the fresh-step measurement
    problems, figures, raw = after_timing(adapter, shape, spec, device, checks, timed_problems)
    build = ROW_BUILDERS[adapter.info.schema]
    row = build(shape, fwd, bwd, moved, figures, not problems)
    raw = {"forward": fwd.to_dict(), "backward": bwd.to_dict() if bwd else None, **raw}
    return {"row": row, "raw": raw, "problems": problems}


def time_case(case: Any, spec: RoundSpec, device: str) -> tuple[Any, Any, list[str]]:
    """Forward and backward timed through ``OutputSampler``s: a few timed calls, chosen
    at random after they returned, are judged against the reference (a shortcut taken
    only while timed FAILs the shape).  Returns (forward, backward or None, problems)."""
    problems: list[str] = []
    fwd_calls = OutputSampler(case.forward)
    fwd = measure(fwd_calls, spec.timing, device)
    problems += fwd_calls.problems(case.verify, "forward")
    bwd = None
    if case.backward:
        bwd_calls = OutputSampler(case.backward)
        bwd = measure(bwd_calls, spec.timing, device)
        problems += bwd_calls.problems(case.verify, "backward")
    return fwd, bwd, problems


def after_timing(
    adapter: Any,
    shape: Shape,
    spec: RoundSpec,
    device: str,
    checks: list[Any],
    timed_problems: list[str],
) -> tuple[list[str], dict[str, float], dict[str, Any]]:
    """After the idiom's timing: the real-training step (fresh values, new buffers, a
    weight update) timed, and the cost of drawing its inputs apart; the 8-step
    simulation when the op keeps state between calls; the re-check on new inputs.
    Returns (problems, worst figures, raw record fields)."""
    fresh = draw = None
    state: dict[str, Any] | None = None
    if spec.extra.get("fresh", True) and hasattr(adapter, "fresh_step"):
        step = adapter.fresh_step(shape, device, spec.seed)
        state = stateful_probe(adapter, shape, device, spec, step.step)
        fresh = measure(step.step, spec.timing, device)
        draw = measure(step.draw, spec.timing, device)
    checks = [*checks, adapter.check(shape, device, spec.seed + 7919)]
    integrity = list(timed_problems)
    if state and state.get("simulation") and state["simulation"].get("problems"):
        integrity += [f"8-step simulation: {p}" for p in state["simulation"]["problems"]]
    problems = [p for c in checks for p in c.problems] + integrity
    figures = {k: _worst(k, [c.figures[k] for c in checks]) for k in checks[0].figures}
    raw = {
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


PROVENANCE = "provenance.json"


def loaded_from(names: list[str]) -> dict[str, str | None]:
    """``__file__`` of each module as the process holds it: the ``sys.modules`` entry
    (else a fresh import) and, for a submodule, the parent package's attribute too,
    recorded as ``<name> (attribute)`` when it is another module (code that rebinds
    ``package._C`` to a copy loaded from elsewhere); None when it has no file."""
    import importlib

    def file_of(module: Any) -> str | None:
        file = getattr(module, "__file__", None)
        return str(Path(file).resolve()) if file else None

    files: dict[str, str | None] = {}
    for name in names:
        module = sys.modules.get(name)
        parent, _, attr = name.rpartition(".")
        held = getattr(sys.modules.get(parent), attr, None) if parent else None
        if module is None:
            module = held if held is not None else importlib.import_module(name)
        files[name] = file_of(module)
        if held is not None and held is not module:
            files[f"{name} (attribute)"] = file_of(held)
    return files


def check_provenance(target: Any, api: Any, out_dir: Path) -> None:
    """Prove that the target package and its compiled modules were loaded from the
    tree under test (``TURBO_CAMPAIGN_SOURCE``, set by the executor); record where
    each came from in ``provenance.json``.  Anything else (a copy in site-packages,
    a library loaded from elsewhere) stops the pass before a number is taken."""
    import os

    expected = os.environ.get("TURBO_CAMPAIGN_SOURCE")
    names = [target.package, *target.api_modules, *target.native_modules]
    files = loaded_from(names)
    files[api.ops.__name__] = str(Path(api.ops.__file__).resolve())
    root = Path(expected).resolve() if expected else None
    outside = {
        name: file
        for name, file in files.items()
        if root is not None and (file is None or root not in Path(file).parents)
    }
    error = None
    if outside:
        where = "; ".join(f"{n} from {f or 'no file'}" for n, f in outside.items())
        error = (
            f"the tree under test is {root}, but {where}: the measurement would not be of "
            "that tree; uninstall the other copy (pip uninstall), rebuild the tree, or fix "
            "the import that reaches outside it"
        )
    record = {"expected_root": str(root) if root else None, "modules": files, "error": error}
    write_json_atomic(out_dir / PROVENANCE, record)
    if error:
        log.error("%s", error)
        raise SystemExit(f"provenance: {error}")


_VISIBILITY = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")


def environment_meta(device: str) -> dict[str, Any]:
    import os

    import torch

    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_hip": getattr(torch.version, "hip", None),
        "torch_cuda": torch.version.cuda,
        "device": device,
        "host": platform.node(),
        "visible_devices": {k: os.environ[k] for k in _VISIBILITY if k in os.environ},
    }
    if device != "cpu":
        meta["gpu_name"] = torch.cuda.get_device_name(0)
    return meta


class Loaded(NamedTuple):
    """What a worker measures with: the op adapter, the device, and the guard over the
    harness bindings (taken before the target was imported)."""

    adapter: Any
    device: str
    guard: BindingGuard


def load_for(spec: RoundSpec, out_dir: Path) -> Loaded:
    """The op adapter over the target imported from the measured tree (its provenance
    proven and recorded in ``out_dir``), the device, and the binding guard."""
    from runner.ops.base import load_adapter
    from runner.targets.registry import get_target

    device = resolve_device(spec.device)
    if device == "cpu":
        pin_cpu_threads(spec)
    guard = BindingGuard()  # before the target is imported: the bindings it must not touch
    target = get_target(spec.target)
    api = target.load_api()
    check_provenance(target, api, out_dir)
    return Loaded(load_adapter(spec.op, api, spec.options), device, guard)


def run_spec(spec: RoundSpec, out_dir: Path) -> int:
    """Measure every shape of ``spec`` into ``out_dir``; return the process exit code."""
    from runner.core.csv_io import write_csv
    from runner.core.csv_schema import get_schema

    adapter, device, guard = load_for(spec, out_dir)
    schema = get_schema(adapter.info.schema)
    rows: list[dict[str, object]] = []
    raw: dict[str, Any] = {}
    for shape in spec.shapes:
        t0 = time.perf_counter()
        try:
            guard.verify()
            result = measure_shape(adapter, shape, spec, device)
            guard.verify()  # a binding replaced while this shape ran voids its timings
        except Exception as exc:  # a shape that raised still gets a FAIL row
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
    write_json_atomic(out_dir / "samples.json", {"spec": spec.to_dict(), "shapes": raw})
    write_json_atomic(out_dir / "meta.json", environment_meta(device))
    write_csv(out_dir / "benchmark.csv", schema, rows)
    return 0


def run_test(spec: RoundSpec, out_dir: Path) -> int:
    """Test mode: run the target's focused test command in the current directory (the
    measured tree) and record its exit code and output."""
    import os
    import subprocess

    command = str(spec.extra["command"])
    env = dict(os.environ)  # "python" in the command is this interpreter
    # Files the command needs that live on the host (the quick script): written into
    # out_dir, which the command reaches as $TURBO_CAMPAIGN_OUT in any executor.
    files = spec.extra.get("files") or {}
    assert isinstance(files, dict)
    for name, text in files.items():
        (out_dir / Path(str(name)).name).write_text(str(text), encoding="utf-8")
    env[OUT_ENV] = str(out_dir.resolve())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    pause_point("worker-test")
    t0 = time.perf_counter()
    proc = subprocess.run(  # the command dies with this worker (parent-death signal)
        command,
        shell=True,
        preexec_fn=child_preexec(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        check=False,
        env=env,
    )
    (out_dir / "test.log").write_text(f"$ {command}\n{proc.stdout}", encoding="utf-8")
    write_json_atomic(
        out_dir / "test.json",
        {
            "command": command,
            "returncode": proc.returncode,
            "seconds": round(time.perf_counter() - t0, 3),
        },
    )
    return proc.returncode


def check_source() -> None:
    """Refuse to measure anything but the tree the host asked for."""
    import os

    expected = os.environ.get("TURBO_CAMPAIGN_SOURCE")
    if expected and Path.cwd().resolve() != Path(expected).resolve():
        raise SystemExit(f"worker runs in {Path.cwd()}, expected {expected}")


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    serving = bool(args) and args[0] == "--serve"
    if serving:
        args = args[1:]
    if len(args) != 2:
        print("usage: python -m runner.worker [--serve] SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    out_dir = Path(args[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        handlers=[logging.FileHandler(out_dir / "worker.log"), logging.StreamHandler(sys.stderr)],
    )
    spec = load_spec(Path(args[0]))
    check_source()
    if serving:
        from runner.bench.serve import serve

        log.info(
            "worker (serving): %s",
            json.dumps({k: spec.to_dict()[k] for k in ("round", "role", "pass_index")}),
        )
        pause_point("worker-pass")
        return serve(spec, out_dir, load_for)
    if spec.extra.get("mode") == "test":
        return run_test(spec, out_dir)
    log.info(
        "worker: %s", json.dumps({k: spec.to_dict()[k] for k in ("round", "role", "pass_index")})
    )
    pause_point("worker-pass")
    return run_spec(spec, out_dir)


if __name__ == "__main__":
    sys.exit(main())
