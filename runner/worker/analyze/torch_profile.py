"""``python -m runner.worker.analyze.torch_profile --out DIR -- -m MODULE ARGS...`` (or ``SCRIPT
ARGS...``): run a benchmark in this process under the torch profiler and write
``DIR/torch_profile.csv``, one row per operator or kernel: name, calls, self and total
CPU time, device time (microseconds).  ``campaign profile`` on the CPU (docs/analysis.md §5).

With ``TURBO_CAMPAIGN_PROFILE_RANGE`` set (``campaign profile`` sets it), only the
operators that ran inside that range's spans on the same thread are counted: the timed
calls (``runner.core.profile_range``), not the harness's checks and input draws.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import runpy
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from runner.core.files import write_atomic
from runner.core.profile_range import RANGE_ENV

if TYPE_CHECKING:
    from torch.autograd.profiler_util import FunctionEvent, FunctionEventAvg
    from torch.profiler import profile as Profile

COLUMNS = ("name", "calls", "self_cpu_us", "cpu_total_us", "device_total_us")


def _device_us(e: FunctionEvent | FunctionEventAvg) -> float:
    device = getattr(e, "device_time_total", None)
    if device is None:
        device = getattr(e, "cuda_time_total", 0.0)
    return float(device or 0.0)


def _inside(events: list[FunctionEvent], name: str) -> list[FunctionEvent]:
    """The events that ran within a span of the range ``name`` on the same thread."""
    spans = [(e.thread, e.time_range.start, e.time_range.end) for e in events if e.name == name]
    return [
        e
        for e in events
        if e.name != name
        and any(
            t == e.thread and start <= e.time_range.start and e.time_range.end <= end
            for t, start, end in spans
        )
    ]


def _rows(profile: Profile, only_range: str = "") -> list[dict[str, str | float]]:
    totals: dict[str, dict[str, float]] = {}
    if only_range:
        events = _inside(list(profile.events()), only_range)
        for e in events:
            row = totals.setdefault(e.name, dict.fromkeys(COLUMNS[1:], 0.0))
            row["calls"] += 1
            row["self_cpu_us"] += e.self_cpu_time_total
            row["cpu_total_us"] += e.cpu_time_total
            row["device_total_us"] += _device_us(e)
    else:
        for a in profile.key_averages():
            totals[a.key] = {
                "calls": a.count,
                "self_cpu_us": a.self_cpu_time_total,
                "cpu_total_us": a.cpu_time_total,
                "device_total_us": _device_us(a),
            }
    rows: list[dict[str, str | float]] = [
        {"name": name, "calls": int(t["calls"]), **{k: round(float(t[k]), 3) for k in COLUMNS[2:]}}
        for name, t in totals.items()
    ]
    rows.sort(key=lambda r: (-float(r["self_cpu_us"]), str(r["name"])))
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

    ap = argparse.ArgumentParser(prog="python -m runner.worker.analyze.torch_profile")
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
    writer.writerows(_rows(prof, os.environ.get(RANGE_ENV, "")))
    write_atomic(ns.out / "torch_profile.csv", out.getvalue())
    return code


if __name__ == "__main__":
    sys.exit(main())
