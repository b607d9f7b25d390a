"""Clock, throttle-reason, temperature and power readings of a GPU, before and after each
shape (docs/measurement.md §2.5: clocks are read, never set).

Sources, first that answers: NVML through ``pynvml`` (nvidia-ml-py); ``nvidia-smi``'s CSV
query; ``amd-smi metric --json`` on ROCm, whose entry is found by PCI bus id
(``runner.core.pci_bus``: amd-smi's index may not be HIP's).  The parsers are pure
functions over text so that they are tested on recorded outputs.  Read-only: nothing
here sets a clock, a power cap or a mode.  ``sample_clocks`` never raises; a failure is a
reading with ``error``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass, field
from typing import Any

from runner.core import pci_bus

NVIDIA_SMI_FIELDS = "clocks.sm,clocks.mem,clocks_throttle_reasons.active,temperature.gpu,power.draw"
NVIDIA_SMI_CMD = (
    "nvidia-smi",
    f"--query-gpu={NVIDIA_SMI_FIELDS}",
    "--format=csv,noheader,nounits",
)
AMD_SMI_CMD = ("amd-smi", "metric", "--json")
TIMEOUT_S = 10

# nvml.h: nvmlClocksThrottleReason* / nvmlClocksEventReason* bits.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "GpuIdle"),
    (0x2, "ApplicationsClocksSetting"),
    (0x4, "SwPowerCap"),
    (0x8, "HwSlowdown"),
    (0x10, "SyncBoost"),
    (0x20, "SwThermalSlowdown"),
    (0x40, "HwThermalSlowdown"),
    (0x80, "HwPowerBrakeSlowdown"),
    (0x100, "DisplayClockSetting"),
)


@dataclass
class ClockReading:
    """One GPU's state at one moment; None where the driver does not say."""

    source: str
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    throttle_mask: int | None = None
    throttle_reasons: list[str] = field(default_factory=list)
    error: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def decode_throttle_mask(mask: int) -> list[str]:
    """Names of the NVML throttle (clock-event) reason bits set in ``mask``."""
    names = [name for bit, name in THROTTLE_BITS if mask & bit]
    unknown = mask & ~sum(bit for bit, _ in THROTTLE_BITS)
    if unknown:
        names.append(f"Unknown(0x{unknown:x})")
    return names


def _number(text: object) -> float | None:
    """A float from '1980', '118.26', '2100 MHz', {'value': 2100, 'unit': 'MHz'}; else None."""
    if isinstance(text, dict):
        return _number(text.get("value"))
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return float(text)
    token = str(text).strip().split(" ")[0] if str(text).strip() else ""
    try:
        return float(token)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]", "N/A"


def parse_nvidia_smi(text: str) -> list[ClockReading]:
    """One reading per GPU line of ``nvidia-smi --query-gpu=<NVIDIA_SMI_FIELDS>
    --format=csv,noheader,nounits``."""
    readings = []
    for line in text.strip().splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != 5:
            continue
        mask: int | None
        try:
            mask = int(cols[2], 16)
        except ValueError:
            mask = None
        readings.append(
            ClockReading(
                source="nvidia-smi",
                sm_mhz=_number(cols[0]),
                mem_mhz=_number(cols[1]),
                throttle_mask=mask,
                throttle_reasons=decode_throttle_mask(mask) if mask is not None else [],
                temperature_c=_number(cols[3]),
                power_w=_number(cols[4]),
            )
        )
    return readings


def parse_amd_smi_metric(text: str) -> list[ClockReading]:
    """One reading per GPU of ``amd-smi metric --json``: a bare list of GPU objects (ROCm
    6.1-6.3) or ``{"gpu_data": [...]}`` (later releases)."""
    data = json.loads(text)
    gpus = data.get("gpu_data", []) if isinstance(data, dict) else data
    return [_amd_reading(g) for g in gpus if isinstance(g, dict)]


def _amd_reading(gpu: dict[str, Any]) -> ClockReading:
    clocks = gpu.get("clock") or {}
    power = gpu.get("power") or {}
    temps = gpu.get("temperature") or {}
    return ClockReading(
        source="amd-smi",
        sm_mhz=_amd_clock(clocks, "gfx"),
        mem_mhz=_amd_clock(clocks, "mem"),
        temperature_c=_first_number(temps, ("hotspot", "edge")),
        power_w=_first_number(power, ("socket_power", "average_socket_power")),
        throttle_reasons=_amd_violations(gpu.get("throttle") or gpu.get("violation") or {}),
    )


def _amd_clock(clocks: dict[str, Any], prefix: str) -> float | None:
    """The current clock of the first domain named ``prefix`` (``gfx_0``, ``mem_0``)."""
    for name in sorted(clocks):
        if name.startswith(prefix) and isinstance(clocks[name], dict):
            value = _number(clocks[name].get("clk"))
            if value is not None:
                return value
    return None


def _first_number(group: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = _number(group.get(key))
        if value is not None:
            return value
    return None


def _amd_violations(group: dict[str, Any]) -> list[str]:
    """Violation kinds that are active now (``*_violation_status: ACTIVE``) or were active
    part of the last interval (``*_violation_activity`` > 0)."""
    reasons = set()
    for key, value in group.items():
        if key.endswith("_violation_status") and str(value).strip().upper() == "ACTIVE":
            reasons.add(key.removesuffix("_violation_status"))
        elif key.endswith("_violation_activity") and (_number(value) or 0) > 0:
            reasons.add(key.removesuffix("_violation_activity"))
    return sorted(reasons)


def sample_clocks(index: int = 0) -> dict[str, object]:
    """The clocks of GPU ``index`` (as torch numbers it) from the first source that
    answers; ``{"source": "none", "error": ...}`` when none does.  Never raises."""
    errors = []
    for reader in (_read_nvml, _read_nvidia_smi, _read_amd_smi):
        try:
            reading = reader(index)
        except Exception as exc:
            errors.append(f"{reader.__name__}: {type(exc).__name__}: {str(exc)[:200]}")
            continue
        if reading is not None:
            return reading.to_dict()
    if not errors:
        errors.append(NO_SOURCE)
    return ClockReading(source="none", error="; ".join(errors)).to_dict()


NO_SOURCE = "no pynvml, nvidia-smi or amd-smi here: the card's clocks could not be checked"


def _cuda_index(index: int) -> int:
    """nvidia-smi's/NVML's index of torch's CUDA device ``index`` under
    ``CUDA_VISIBLE_DEVICES`` (as the host sets it, ``runner.executors.gpus.gpu_env``)."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")]
    visible = [v for v in visible if v]
    if visible and index < len(visible) and visible[index].isdigit():
        return int(visible[index])
    return index


_NVML: dict[str, object] = {}  # "mod": pynvml, once initialised


def _read_nvml(index: int) -> ClockReading | None:
    try:
        import pynvml
    except ImportError:
        return None
    index = _cuda_index(index)
    if "mod" not in _NVML:
        pynvml.nvmlInit()
        _NVML["mod"] = pynvml
    h = pynvml.nvmlDeviceGetHandleByIndex(index)
    reasons_fn = getattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if reasons_fn is None:
        reasons_fn = pynvml.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = int(reasons_fn(h))
    return ClockReading(
        source="nvml",
        sm_mhz=float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
        mem_mhz=float(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)),
        temperature_c=float(pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        power_w=pynvml.nvmlDeviceGetPowerUsage(h) / 1000.0,
        throttle_mask=mask,
        throttle_reasons=decode_throttle_mask(mask),
    )


def _run(cmd: tuple[str, ...]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {proc.returncode}: {proc.stderr.strip()[:200]}")
    return proc.stdout


def _read_nvidia_smi(index: int) -> ClockReading | None:
    text = _run(NVIDIA_SMI_CMD)
    if text is None:
        return None
    readings = parse_nvidia_smi(text)
    index = _cuda_index(index)
    return readings[index] if index < len(readings) else None


def _read_amd_smi(index: int) -> ClockReading | None:
    """HIP device ``index``'s entry of ``amd-smi metric --json``, matched by PCI bus id;
    raises (recorded as the reading's error) when the card cannot be told."""
    record = amd_smi_metric_record(index)
    return None if record is None else _amd_reading(record)


def amd_smi_metric_record(index: int) -> dict[str, Any] | None:
    """The ``amd-smi metric --json`` record of HIP device ``index``: ROCr's physical
    index (``ROCR_VISIBLE_DEVICES``) -> the KFD node's bus id -> amd-smi's index for that
    bus id (``amd-smi list --json``).  None without amd-smi; raises when it is there but
    the card cannot be matched (never a guess by position)."""
    if shutil.which(AMD_SMI_CMD[0]) is None:
        return None
    bus = hip_bus_id(index)
    by_bus = pci_bus.parse_amd_smi_list(_run(pci_bus.AMD_SMI_LIST_CMD) or "[]")
    if bus not in by_bus:
        raise RuntimeError(f"amd-smi list names no GPU at bus id {bus} ({sorted(by_bus)})")
    records = pci_bus.amd_smi_records_by_index(_run(AMD_SMI_CMD) or "[]")
    if by_bus[bus] not in records:
        raise RuntimeError(f"amd-smi metric has no entry for GPU {by_bus[bus]} (bus {bus})")
    return records[by_bus[bus]]


def hip_bus_id(index: int) -> str:
    """The PCI bus id of HIP device ``index`` of this process, from the KFD topology
    (``TURBO_CAMPAIGN_KFD_TOPOLOGY`` overrides its root)."""
    physical = pci_bus.rocr_physical_index(index)
    if physical is None:
        raise RuntimeError(f"HIP device {index}: the visible-devices lists name it by UUID")
    root = os.environ.get(KFD_TOPOLOGY_ENV, pci_bus.KFD_TOPOLOGY)
    gpus = pci_bus.kfd_gpus(root)
    if physical >= len(gpus):
        raise RuntimeError(f"ROCr GPU {physical}: the KFD topology at {root} lists {len(gpus)}")
    return gpus[physical].bus_id


KFD_TOPOLOGY_ENV = "TURBO_CAMPAIGN_KFD_TOPOLOGY"
