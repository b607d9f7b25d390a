"""``campaign profile`` (docs/analysis.md §5): the torch profiler path for real on the
CPU, on a copy of the session's ``slow_tiny`` campaign; the Nsight Compute and rocprofv3
parsers on small samples written here.

Where the samples' formats come from:

* rocprofv3: the columns of ``<name>_kernel_stats.csv`` and ``<name>_kernel_trace.csv``
  as rocprofv3's documentation lists them (rocprofiler-sdk, "Using rocprofv3", kernel
  trace and ``--stats``), and the invocation of the brief that upstream's tool-rocprof page
  leaves to ``rocprofv3 --help`` (Primus-Turbo
  ``agent/skills/primus-turbo-develop/run_profile/tool-rocprof/SKILL.md``, checked at
  a6a16cdc: "The exact rocprofv3 flags vary by ROCm release").  Not a recorded run: no
  ROCm machine was at hand.
* Nsight Compute: the layout of ``ncu --csv --page raw`` (a header row, a units row, one
  row per profiled launch; ``==PROF==`` lines before it), the metric names of its
  LaunchStats, Occupancy and SpeedOfLight sections; and ``data/ncu_raw_h200_9d73f9a.csv``,
  recorded: six launches (the header, units row and ``==PROF==`` lines kept whole) of an
  unfiltered ``campaign profile --tool ncu`` of the example's blockwise FP8 GEMM campaign
  on one H200 at 9d73f9a, 2026-12-03 (docs/benchmarks.md, "campaign profile on one H200").
"""

from __future__ import annotations

import csv
import io
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import run_cli

from runner.core.errors import ProfileFailed
from runner.core.profile_range import RANGE_ENV, RANGE_NAME
from runner.flow.profile import wrapped
from runner.render.profile_table import parse_ncu_raw, parse_rocprof

DATA = Path(__file__).parent / "data"

STATS = ("Name", "Calls", "TotalDurationNs", "AverageNs", "Percentage", "MinNs", "MaxNs", "StdDev")
TRACE = (
    "Kind",
    "Agent_Id",
    "Queue_Id",
    "Kernel_Id",
    "Kernel_Name",
    "Correlation_Id",
    "Start_Timestamp",
    "End_Timestamp",
    "LDS_Block_Size",
    "Scratch_Size",
    "VGPR_Count",
    "Accum_VGPR_Count",
    "SGPR_Count",
    "Workgroup_Size_X",
    "Grid_Size_X",
)


def _csv(columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns, quoting=csv.QUOTE_ALL)
    writer.writeheader()
    writer.writerows(dict(zip(columns, row, strict=True)) for row in rows)
    return out.getvalue()


def test_rocprofv3_stats_and_trace_make_one_row_per_kernel() -> None:
    gemm, quant = "_gemm_fp8_blockwise_kernel", "_quant_groups_kernel"
    stats = _csv(
        STATS,
        [
            (quant, 4, 200_000, 50_000, 20.0, 49_000, 51_000, 800.0),
            (gemm, 4, 800_000, 200_000, 80.0, 190_000, 210_000, 5000.0),
        ],
    )
    trace = _csv(
        TRACE,
        [("KERNEL_DISPATCH", 1, 1, 7, gemm, 1, 10, 210_010, 32768, 0, 184, 0, 56, 512, 65536)] * 2,
    )
    rows = parse_rocprof(stats, trace)
    assert [r["kernel"] for r in rows] == [gemm, quant]  # heaviest first
    assert rows[0] == {
        "kernel": gemm,
        "calls": 4,
        "total_us": 800.0,
        "share_pct": 80.0,
        "avg_us": 200.0,
        "lds_bytes": 32768.0,
        "scratch_bytes": 0.0,
        "vgpr": 184.0,
        "agpr": 0.0,
        "sgpr": 56.0,
    }
    assert "vgpr" not in rows[1]  # no dispatch of it in the trace: left out, not guessed


def test_ncu_raw_page_groups_launches_by_kernel() -> None:
    header = [
        "ID",
        "Process ID",
        "Process Name",
        "Kernel Name",
        "gpu__time_duration.sum",
        "launch__registers_per_thread",
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
    ]
    units = ["", "", "", "", "usecond", "register/thread", "%", "%"]
    launches = [
        ["0", "9", "python", "_gemm_fp8_blockwise_kernel", "120.5", "168", "12.4", "40.1"],
        ["1", "9", "python", "_gemm_fp8_blockwise_kernel", "119.5", "168", "12.6", "39.9"],
        ["2", "9", "python", "_quant_groups_kernel", "10", "32", "80", "91"],
    ]
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    writer.writerows([header, units, *launches])
    text = "==PROF== Connected to process 9\nprogram output\n" + out.getvalue()
    rows = parse_ncu_raw(text)
    assert rows[0] == {
        "kernel": "_gemm_fp8_blockwise_kernel",
        "calls": 2,
        "total_us": 240.0,
        "regs": 168.0,
        "occupancy_pct": 12.5,
        "dram_pct": 40.0,
        "share_pct": 96.0,
    }
    assert rows[1]["kernel"] == "_quant_groups_kernel" and rows[1]["calls"] == 1
    assert parse_ncu_raw("==PROF== no kernels were profiled\n") == []


def test_a_recorded_h200_ncu_page_parses_per_kernel() -> None:
    rows = parse_ncu_raw((DATA / "ncu_raw_h200_9d73f9a.csv").read_text(encoding="utf-8"))
    by_name = {r["kernel"]: r for r in rows}
    gemm = by_name["_gemm_fp8_blockwise_kernel"]
    assert gemm["calls"] == 3 and gemm["total_us"] == pytest.approx(3401.568)
    assert gemm["regs"] == 240.0 and gemm["occupancy_pct"] == pytest.approx(12.48)
    assert gemm["dyn_smem_bytes"] == 65536.0
    assert len(rows) == 4 and sum(r["calls"] for r in rows) == 6
    assert sum(r["share_pct"] for r in rows) == pytest.approx(100.0, abs=0.05)


def test_nsight_compute_is_asked_for_the_timed_range_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tool = tmp_path / "bin" / "ncu"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    tool.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tool.parent}{os.pathsep}{os.environ['PATH']}")
    argv = wrapped("ncu", ["python3", "-m", "runner.worker.fullbench"], tmp_path, 50)
    i = argv.index("--nvtx-include")
    assert "--nvtx" in argv[:i] and argv[i + 1] == f"{RANGE_NAME}/"
    assert argv[-3:] == ["python3", "-m", "runner.worker.fullbench"]


TIMED_SCRIPT = """
import torch
from runner.core.profile_range import profiled_region

a = torch.randn(64, 64)
b = torch.randn(64, 64)
with profiled_region("cpu"):
    for _ in range(3):
        torch.mm(a, b)
torch.add(a, b)
"""


@pytest.mark.parametrize("ranged", [True, False])
def test_the_torch_profile_keeps_only_the_timed_range(tmp_path: Path, ranged: bool) -> None:
    script = tmp_path / "bench.py"
    script.write_text(TIMED_SCRIPT, encoding="utf-8")
    env = {**os.environ, RANGE_ENV: RANGE_NAME if ranged else ""}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "runner.worker.analyze.torch_profile",
            "--out",
            str(tmp_path),
            "--",
            str(script),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    rows = list(csv.DictReader(io.StringIO((tmp_path / "torch_profile.csv").read_text())))
    calls = {r["name"]: int(r["calls"]) for r in rows}
    assert calls["aten::mm"] == 3
    outside = {"aten::randn", "aten::add"}
    assert (outside & set(calls) == set()) if ranged else outside <= set(calls)


def test_profile_on_the_cpu_runs_the_torch_profiler(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = copy_campaign(slow_tiny, tmp_path / "c", "t")
    root = str(campaign.parent)
    argv = ["--campaigns-root", root, "profile", "--round", "1", "--campaign", "t"]
    code, out = run_cli(argv, capsys)
    assert code == 0, out
    assert "profile of round 1 (torch)" in out and "runner.worker.fullbench" in out
    folder = campaign / "profiles" / "round-1"
    table = (folder / "profile.md").read_text(encoding="utf-8")
    assert "## incumbent" in table and "inside the timed calls only" in table
    assert "| kernel | calls | total_us | cpu_total_us | share_pct |" in table
    rows = list(
        csv.DictReader(io.StringIO((folder / "incumbent" / "torch_profile.csv").read_text()))
    )
    assert any(r["name"].startswith("aten::") and int(r["calls"]) > 0 for r in rows)


def test_a_profile_whose_role_times_out_fails_and_says_so(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The BASELINE's one role profiled past ``--timeout``: exit 6 (an infrastructure
    error) that names the role and its timeout, and profile.md written with the note."""
    campaign = copy_campaign(slow_tiny, tmp_path / "c", "t")
    root = str(campaign.parent)
    argv = ["--campaigns-root", root, "profile", "--round", "1", "--campaign", "t"]
    code, out = run_cli([*argv, "--timeout", "0.2"], capsys)
    assert code == ProfileFailed.return_code == 6, out
    assert "incumbent: timed out after 0.2 s" in out
    assert "round 1's profile failed for incumbent" in out and "larger --timeout" in out
    table = (campaign / "profiles" / "round-1" / "profile.md").read_text(encoding="utf-8")
    assert "incumbent: timed out after 0.2 s" in table and "## incumbent" not in table
