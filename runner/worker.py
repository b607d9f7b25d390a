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
from typing import Any

from runner.bench.timing import ClockTampered, check_clocks, measure
from runner.rows import ROW_BUILDERS, failed_row
from runner.shapes import Shape
from runner.spec import RoundSpec, load_spec, write_json_atomic

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
    """Check, time, re-check one shape; return its CSV row and raw record."""
    checks = [adapter.check(shape, device, spec.seed + 1000 * i) for i in range(spec.check_seeds)]
    case = adapter.case(shape, device, spec.seed)
    fwd = measure(case.forward, spec.timing, device)
    bwd = measure(case.backward, spec.timing, device) if case.backward else None
    moved = {"fwd_bytes": case.fwd_bytes, "bwd_bytes": case.bwd_bytes}
    del case  # free the timed tensors before the fresh-step measurement
    fresh = None
    if spec.extra.get("fresh", True) and hasattr(adapter, "fresh_step"):
        fresh = measure(adapter.fresh_step(shape, device, spec.seed), spec.timing, device)
    checks.append(adapter.check(shape, device, spec.seed + 7919))
    problems = [p for c in checks for p in c.problems]
    figures = {k: _worst(k, [c.figures[k] for c in checks]) for k in checks[0].figures}
    build = ROW_BUILDERS[adapter.info.schema]
    row = build(shape, fwd, bwd, moved, figures, not problems)
    raw = {
        "forward": fwd.to_dict(),
        "backward": bwd.to_dict() if bwd else None,
        "fresh_step": fresh.to_dict() if fresh else None,
        "checks": [{"ok": c.ok, "figures": c.figures, "problems": c.problems} for c in checks],
    }
    return {"row": row, "raw": raw, "problems": problems}


def _worst(key: str, values: list[float]) -> float:
    """The worst figure over the checks: the lowest SNR, the largest error."""
    return max(values) if key == "max_abs_err" else min(values)


def _check_imported_from_source(api: Any) -> None:
    """The target package must come from the measured tree, not from site-packages
    (an editable install of the user's checkout would silently win otherwise)."""
    import os

    expected = os.environ.get("TURBO_CAMPAIGN_SOURCE")
    origin = Path(api.ops.__file__).resolve()
    if expected and Path(expected).resolve() not in origin.parents:
        raise SystemExit(
            f"the target was imported from {origin}, not from the measured tree {expected}; "
            "uninstall the copy in site-packages or reinstall it editable from that tree"
        )


def _refuse_patched_clocks() -> None:
    """Importing the target must not replace a clock of the ``time`` module (the clocks
    were captured when ``runner.bench.timing`` was imported, before the target)."""
    try:
        check_clocks()
    except ClockTampered as exc:
        log.error("%s", exc)
        raise SystemExit(f"refusing to measure: {exc}") from None


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


def load_for(spec: RoundSpec) -> tuple[Any, str]:
    """The op adapter over the target imported from the measured tree, and the device."""
    from runner.ops.base import load_adapter
    from runner.targets.registry import get_target

    device = resolve_device(spec.device)
    if device == "cpu":
        pin_cpu_threads(spec)
    api = get_target(spec.target).load_api()
    _check_imported_from_source(api)
    _refuse_patched_clocks()
    return load_adapter(spec.op, api, spec.options), device


def run_spec(spec: RoundSpec, out_dir: Path) -> int:
    """Measure every shape of ``spec`` into ``out_dir``; return the process exit code."""
    from runner.schema import get_schema, write_csv

    adapter, device = load_for(spec)
    schema = get_schema(adapter.info.schema)
    rows: list[dict[str, object]] = []
    raw: dict[str, Any] = {}
    for shape in spec.shapes:
        t0 = time.perf_counter()
        try:
            result = measure_shape(adapter, shape, spec, device)
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


OUT_ENV = "TURBO_CAMPAIGN_OUT"


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
    t0 = time.perf_counter()
    proc = subprocess.run(
        command,
        shell=True,
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
        return serve(spec, out_dir, load_for)
    if spec.extra.get("mode") == "test":
        return run_test(spec, out_dir)
    log.info(
        "worker: %s", json.dumps({k: spec.to_dict()[k] for k in ("round", "role", "pass_index")})
    )
    return run_spec(spec, out_dir)


if __name__ == "__main__":
    sys.exit(main())
