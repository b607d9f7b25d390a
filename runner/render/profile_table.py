"""Per-kernel tables from a profiler's files (``campaign profile``, docs/analysis.md §5).

* Nsight Compute: ``ncu --csv --page raw`` prints one row per profiled launch, a header
  row, then a row of units; the metric columns are ncu's own names
  (``gpu__time_duration.sum``, ``launch__registers_per_thread``,
  ``sm__warps_active.avg.pct_of_peak_sustained_active`` for achieved occupancy, the
  speed-of-light throughputs, shared-memory bank conflicts).
* rocprofv3 (``--kernel-trace --stats --output-format csv``): ``<name>_kernel_stats.csv``
  (``Name, Calls, TotalDurationNs, AverageNs, Percentage, MinNs, MaxNs, StdDev``) and
  ``<name>_kernel_trace.csv`` (one row per dispatch: ``Kernel_Name``, ``Start_Timestamp``,
  ``End_Timestamp``, ``LDS_Block_Size``, ``Scratch_Size``, ``VGPR_Count``,
  ``Accum_VGPR_Count``, ``SGPR_Count``, ...), the columns of rocprofv3's documentation.
* the torch profiler: ``runner.worker.analyze.torch_profile``'s CSV.

Every parser returns rows ``{"kernel", "calls", "total_us", "share_pct", ...}``, heaviest
first; a column a file lacks is left out, never guessed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Literal, TypedDict

__all__ = ["NCU_METRICS", "parse_ncu_raw", "parse_rocprof", "parse_torch", "table_markdown"]

NcuColumn = Literal[
    "regs",
    "occupancy_pct",
    "sm_pct",
    "dram_pct",
    "memory_pct",
    "smem_bank_conflicts",
    "dyn_smem_bytes",
]
TraceColumn = Literal["lds_bytes", "scratch_bytes", "vgpr", "agpr", "sgpr"]


class ProfileRow(TypedDict, total=False):
    """One kernel (or operator) of a table; a column its file lacks is left out."""

    kernel: str
    calls: int
    total_us: float
    share_pct: float
    avg_us: float
    cpu_total_us: float | None
    regs: float | None
    occupancy_pct: float | None
    sm_pct: float | None
    dram_pct: float | None
    memory_pct: float | None
    smem_bank_conflicts: float | None
    dyn_smem_bytes: float | None
    lds_bytes: float | None
    scratch_bytes: float | None
    vgpr: float | None
    agpr: float | None
    sgpr: float | None


# ncu raw-page metric -> the table's column (averaged over a kernel's launches)
NCU_METRICS: dict[str, NcuColumn] = {
    "launch__registers_per_thread": "regs",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_pct",
    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum": "smem_bank_conflicts",
    "launch__shared_mem_per_block_dynamic": "dyn_smem_bytes",
}
_ROCPROF_TRACE: dict[str, TraceColumn] = {
    "LDS_Block_Size": "lds_bytes",
    "Scratch_Size": "scratch_bytes",
    "VGPR_Count": "vgpr",
    "Accum_VGPR_Count": "agpr",
    "SGPR_Count": "sgpr",
}


def _num(text: object) -> float | None:
    try:
        return float(str(text).replace(",", ""))
    except (TypeError, ValueError):
        return None


def _with_shares(rows: list[ProfileRow]) -> list[ProfileRow]:
    total = sum(r["total_us"] for r in rows) or 1.0
    for r in rows:
        r.setdefault("share_pct", round(100.0 * r["total_us"] / total, 2))
    return sorted(rows, key=lambda r: (-r["total_us"], r["kernel"]))


def _mean(values: Iterable[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(sum(got) / len(got), 2) if got else None


def _ncu_time_us(value: float, unit: str) -> float:
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
    return value * scale.get(unit.strip().lower(), 1e-3)


def parse_ncu_raw(text: str) -> list[ProfileRow]:
    """Rows per kernel name from ``ncu --csv --page raw`` (lines before the header, such
    as ``==PROF==`` notes and the program's own output, are skipped)."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if '"Kernel Name"' in ln), None)
    if start is None:
        return []
    reader = list(csv.reader(lines[start:]))
    header, units = reader[0], reader[1] if len(reader) > 1 else []
    unit_of = dict(zip(header, units, strict=False))
    launches: dict[str, list[dict[str, str]]] = {}
    for cells in reader[2:]:
        rec = dict(zip(header, cells, strict=False))
        if rec.get("Kernel Name"):
            launches.setdefault(rec["Kernel Name"], []).append(rec)
    time_unit = unit_of.get("gpu__time_duration.sum", "nsecond")
    rows: list[ProfileRow] = []
    for name, recs in launches.items():
        times = [_num(r.get("gpu__time_duration.sum")) for r in recs]
        row: ProfileRow = {"kernel": name, "calls": len(recs)}
        row["total_us"] = round(sum(_ncu_time_us(t, time_unit) for t in times if t), 3)
        for metric, col in NCU_METRICS.items():
            if metric in unit_of:
                row[col] = _mean(_num(r.get(metric)) for r in recs)
        rows.append(row)
    return _with_shares(rows)


def parse_rocprof(stats_text: str, trace_text: str = "") -> list[ProfileRow]:
    """Rows per kernel from rocprofv3's kernel stats, with the resources its kernel
    trace records for each kernel (the first dispatch's: they do not change)."""
    resources: dict[str, ProfileRow] = {}
    for rec in csv.DictReader(io.StringIO(trace_text)):
        name = rec.get("Kernel_Name", "")
        if name and name not in resources:
            found: ProfileRow = {}
            for key, col in _ROCPROF_TRACE.items():
                if key in rec:
                    found[col] = _num(rec[key])
            resources[name] = found
    rows = []
    for rec in csv.DictReader(io.StringIO(stats_text)):
        name = rec.get("Name", "")
        total_ns = _num(rec.get("TotalDurationNs")) or 0.0
        row: ProfileRow = {"kernel": name, "calls": int(_num(rec.get("Calls")) or 0)}
        row["total_us"] = round(total_ns / 1e3, 3)
        share = _num(rec.get("Percentage"))
        if share is not None:
            row["share_pct"] = round(share, 2)
        row["avg_us"] = round((_num(rec.get("AverageNs")) or 0.0) / 1e3, 3)
        row.update(resources.get(name, {}))
        rows.append(row)
    return _with_shares(rows)


def parse_torch(text: str) -> list[ProfileRow]:
    """Rows per operator from ``runner.worker.analyze.torch_profile``'s CSV: device time where
    a GPU ran, else self CPU time, is the total."""
    recs = list(csv.DictReader(io.StringIO(text)))
    on_device = any((_num(r.get("device_total_us")) or 0) > 0 for r in recs)
    key = "device_total_us" if on_device else "self_cpu_us"
    rows: list[ProfileRow] = [
        {
            "kernel": r["name"],
            "calls": int(_num(r.get("calls")) or 0),
            "total_us": _num(r.get(key)) or 0.0,
            "cpu_total_us": _num(r.get("cpu_total_us")),
        }
        for r in recs
    ]
    return _with_shares(rows)


def table_markdown(rows: list[ProfileRow], limit: int = 25) -> str:
    """A markdown table of the heaviest ``limit`` rows, every column any row has."""
    if not rows:
        return "(no kernel recorded)"
    cols = list(dict.fromkeys(k for r in rows[:limit] for k in r))
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for r in rows[:limit]:
        cells = ["-" if r.get(c) is None else str(r.get(c)).replace("|", "\\|") for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    if len(rows) > limit:
        lines.append(f"\n({len(rows) - limit} lighter rows left out)")
    return "\n".join(lines)
