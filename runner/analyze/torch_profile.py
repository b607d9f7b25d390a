"""``python -m runner.analyze.torch_profile --out DIR -- -m MODULE ARGS...`` (or ``SCRIPT
ARGS...``): run a benchmark in this process under the torch profiler and write
``DIR/torch_profile.csv``, one row per operator or kernel: name, calls, self and total
CPU time, device time (microseconds).  ``campaign profile`` on the CPU (docs/analysis.md §5).
"""

from __future__ import annotations

import argparse
import csv
import io
import runpy
import sys
from pathlib import Path
from typing import Any

from runner.core.files import write_atomic

COLUMNS = ("name", "calls", "self_cpu_us", "cpu_total_us", "device_total_us")


def _rows(profile: Any) -> list[dict[str, Any]]:
    rows = []
    for e in profile.key_averages():
        device = getattr(e, "device_time_total", None)
        if device is None:
            device = getattr(e, "cuda_time_total", 0.0)
        rows.append({
            "name": e.key,
            "calls": e.count,
            "self_cpu_us": round(e.self_cpu_time_total, 3),
            "cpu_total_us": round(e.cpu_time_total, 3),
            "device_total_us": round(float(device or 0.0), 3),
        })  # fmt: skip
    rows.sort(key=lambda r: (-r["self_cpu_us"], r["name"]))
    return rows


def _run(target: list[str]) -> int:
    """Run ``-m module args`` or ``script args`` as ``python`` would; its exit status."""
    saved = sys.argv
    try:
        if target[0] == "-m":
            sys.argv = [target[1], *target[2:]]
            runpy.run_module(target[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(target)
            runpy.run_path(target[0], run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = saved
    return 0


def main(argv: list[str] | None = None) -> int:
    import torch
    from torch.profiler import ProfilerActivity, profile

    ap = argparse.ArgumentParser(prog="python -m runner.analyze.torch_profile")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("target", nargs=argparse.REMAINDER)
    ns = ap.parse_args(argv)
    target = ns.target[1:] if ns.target[:1] == ["--"] else ns.target
    if not target:
        ap.error("give the benchmark to run after --: -m MODULE ARGS or SCRIPT ARGS")
    activities = [ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        code = _run(target)
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=COLUMNS)
    writer.writeheader()
    writer.writerows(_rows(prof))
    write_atomic(ns.out / "torch_profile.csv", out.getvalue())
    return code


if __name__ == "__main__":
    sys.exit(main())
