"""Thermal gating before a timed measurement: a card that heats across a round slows the
later role, so when its headroom (the distance to its slowdown temperature) is under
``PAUSE_BELOW_C`` the worker waits, bounded, until it is back to ``RESUME_AT_C``
(nsight-python's rule: pause below 10 C of headroom, resume at 40 C).  What it did is
recorded with the shape's timing (``thermal``).

Sources: ``amd-smi`` on ROCm, the card matched by PCI bus id (``runner.worker.bench.clocks``):
``metric`` temperatures (edge, hotspot, mem) against ``static --limit``'s slowdown
limits (edge, hotspot, vram); ``nvidia-smi``'s ``temperature.gpu.tlimit`` (headroom to
the slowdown limit, in C) on CUDA.  Without either the record says the check could not
be made.  Read-only, and it never raises.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from runner.core import pci_bus
from runner.worker.bench import clocks

PAUSE_BELOW_C = 10.0
RESUME_AT_C = 40.0
WAIT_ENV = "TURBO_CAMPAIGN_THERMAL_WAIT_S"  # the bound of one wait, seconds
WAIT_S = 120.0
POLL_S = 2.0
AMD_LIMIT_CMD = ("amd-smi", "static", "--limit", "--json")
NVIDIA_TLIMIT_CMD = (
    "nvidia-smi",
    "--query-gpu=temperature.gpu.tlimit",
    "--format=csv,noheader,nounits",
)
# amd-smi metric's temperature sensor -> static --limit's slowdown limit of that sensor
AMD_SENSORS = {
    "edge": "slowdown_edge_temperature",
    "hotspot": "slowdown_hotspot_temperature",
    "mem": "slowdown_vram_temperature",
}


@dataclass
class Headroom:
    """The smallest distance, in C, of one card's sensors to their slowdown limits."""

    source: str
    headroom_c: float | None = None
    sensor: str = ""
    error: str = ""


@dataclass
class ThermalWait:
    """What the gate did before one measurement."""

    source: str
    start_headroom_c: float | None
    end_headroom_c: float | None
    waited_s: float = 0.0
    timed_out: bool = False
    error: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def amd_headroom(metric: dict[str, Any], limits: dict[str, Any]) -> Headroom:
    """The headroom of one card from its ``amd-smi metric`` and ``static --limit``
    records; sensors that say N/A on either side are left out."""
    temps, limit = metric.get("temperature") or {}, limits.get("limit") or {}
    best: tuple[float, str] | None = None
    for sensor, limit_key in AMD_SENSORS.items():
        temp = clocks._number(temps.get(sensor))
        cap = clocks._number(limit.get(limit_key))
        if temp is not None and cap is not None and (best is None or cap - temp < best[0]):
            best = (cap - temp, sensor)
    if best is None:
        return Headroom("amd-smi", error="no sensor with both a temperature and a limit")
    return Headroom("amd-smi", best[0], best[1])


def read_headroom(index: int) -> Headroom:
    """HIP/CUDA device ``index``'s headroom from the first tool here; never raises."""
    try:
        if shutil.which("amd-smi"):
            metric = clocks.amd_smi_metric_record(index)
            bus = clocks.hip_bus_id(index)
            smi = pci_bus.parse_amd_smi_list(clocks._run(pci_bus.AMD_SMI_LIST_CMD) or "[]")[bus]
            limits = pci_bus.amd_smi_records_by_index(clocks._run(AMD_LIMIT_CMD) or "[]")
            return amd_headroom(metric or {}, limits.get(smi, {}))
        if shutil.which("nvidia-smi"):
            lines = (clocks._run(NVIDIA_TLIMIT_CMD) or "").strip().splitlines()
            value = clocks._number(lines[clocks._cuda_index(index)])
            return (
                Headroom("nvidia-smi", value, "gpu")
                if value is not None
                else Headroom(
                    "nvidia-smi", error=f"temperature.gpu.tlimit unknown here: {lines!r}"[:200]
                )
            )
    except Exception as exc:
        return Headroom("error", error=f"{type(exc).__name__}: {str(exc)[:200]}")
    return Headroom("none", error="no amd-smi or nvidia-smi here: headroom not checked")


def wait_for_headroom(
    index: int,
    bound_s: float | None = None,
    read: Callable[[int], Headroom] = read_headroom,
    poll_s: float = POLL_S,
) -> ThermalWait:
    """Wait while the card is under ``PAUSE_BELOW_C`` of headroom, until it is back to
    ``RESUME_AT_C`` or ``bound_s`` (``TURBO_CAMPAIGN_THERMAL_WAIT_S``, default 120 s)
    has passed; no wait when the headroom is unknown (the record says why)."""
    bound = float(os.environ.get(WAIT_ENV, WAIT_S)) if bound_s is None else bound_s
    first = read(index)
    out = ThermalWait(first.source, first.headroom_c, first.headroom_c, error=first.error)
    if first.headroom_c is None or first.headroom_c >= PAUSE_BELOW_C:
        return out
    t0 = time.monotonic()
    now = first
    while now.headroom_c is None or now.headroom_c < RESUME_AT_C:
        if time.monotonic() - t0 >= bound:
            out.timed_out = True
            break
        time.sleep(poll_s)
        now = read(index)
    out.waited_s = round(time.monotonic() - t0, 3)
    out.end_headroom_c, out.error = now.headroom_c, now.error
    return out
