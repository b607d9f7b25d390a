"""Pure parsers for the tools that ``runner.store.fingerprint`` asks about the machine.

Each parser takes the tool's text output and returns plain data; none runs anything,
so they are tested on recorded samples (``tests/data/fingerprint/``).  A parser never
raises on odd input: a field it cannot find is ``None``, text it cannot read at all
gives an empty result.

amd-smi's JSON comes in two shapes, both accepted: a bare list ``[{"gpu": 0, ...}]``
(amd-smi 24.x, ROCm 6.x) and ``{"gpu_data": [...]}`` (newer releases).  Its field names
moved too (``vbios`` became ``ifwi``; ``limit.socket_power`` became
``limit.ppt0.socket_power_limit``); the parsers read both.
"""

from __future__ import annotations

import json
import re
from typing import TypedDict

_MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "none", "unknown"}

Record = dict[str, object]
"""One GPU's fields as a parser found them (a tool's JSON object, or a parsed line)."""


class RocmGpu(TypedDict):
    """One GPU agent of ``rocminfo``."""

    architecture: str | None
    model: object
    compute_units: float | int | None


class RocmInfo(TypedDict):
    """What ``parse_rocminfo`` reads."""

    runtime_version: str | None
    rock_version: str | None
    gpus: list[RocmGpu]


def clean(value: object) -> object:
    """``None`` for the placeholders the tools print when a value is unavailable."""
    if isinstance(value, str):
        value = value.strip()
        return None if value.lower() in _MISSING else value
    return value


def number(value: object) -> float | int | None:
    """A number from ``{"value": 750, "unit": "W"}``, ``750``, ``"750 W"`` or
    ``"1980 MHz"``; ``None`` for placeholders and text without a number."""
    if isinstance(value, dict):
        value = value.get("value")
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        m = re.match(r"\s*(-?\d+(?:\.\d+)?)", value)
        if m:
            f = float(m.group(1))
            return int(f) if f.is_integer() else f
    return None


def load_json_lenient(text: str) -> object:
    """Parse JSON that may be preceded by warnings (the runner merges stderr into
    stdout).  Returns ``None`` when no JSON value can be found."""
    try:
        return json.loads(text)
    except (json.JSONDecodeError, TypeError):
        pass
    decoder = json.JSONDecoder()
    for m in re.finditer(r"[\[{]", text or ""):
        try:
            return decoder.raw_decode(text, m.start())[0]
        except json.JSONDecodeError:
            continue
    return None


def amd_smi_records(text: str) -> list[Record]:
    """The per-GPU records of an ``amd-smi ... --json`` output, in either shape,
    sorted by GPU index."""
    data = load_json_lenient(text)
    if isinstance(data, dict):
        data = data.get("gpu_data", [data])
    if not isinstance(data, list):
        return []
    records = [r for r in data if isinstance(r, dict)]
    return sorted(records, key=_gpu_index)


def _gpu_index(rec: Record) -> int:
    index = rec.get("gpu")
    return index if isinstance(index, int) else 0


def _lower_keys(d: object) -> Record:
    return {str(k).lower(): v for k, v in d.items()} if isinstance(d, dict) else {}


# --------------------------------------------------------------------------- amd-smi


def parse_amd_smi_static(text: str) -> list[Record]:
    """``amd-smi static --json``: one dict per GPU with ``gpu``, ``model``,
    ``architecture``, ``driver_version``, ``vbios``, ``power_cap_w``."""
    return [_static_record(r) for r in amd_smi_records(text)]


def _static_record(rec: Record) -> Record:
    asic = _lower_keys(rec.get("asic"))
    board = _lower_keys(rec.get("board"))
    driver = _lower_keys(rec.get("driver"))
    arch = clean(asic.get("target_graphics_version"))
    return {
        "gpu": rec.get("gpu"),
        "model": clean(asic.get("market_name")) or clean(board.get("product_name")),
        "architecture": str(arch).split(":")[0].lower() if arch else None,
        "driver_version": clean(driver.get("version")) or clean(driver.get("driver_version")),
        "vbios": _vbios(rec),
        "power_cap_w": _power_cap(_lower_keys(rec.get("limit"))),
    }


def _vbios(rec: Record) -> str | None:
    """The VBIOS (``vbios``, amd-smi <= 25) or IFWI (``ifwi``, newer) version, else
    its part number."""
    for key in ("vbios", "ifwi"):
        info = _lower_keys(rec.get(key))
        found = clean(info.get("version")) or clean(info.get("part_number"))
        if found:
            return str(found)
    return None


def _power_cap(limit: Record) -> float | int | None:
    ppt0 = _lower_keys(limit.get("ppt0"))
    for value in (
        ppt0.get("socket_power_limit"),
        limit.get("socket_power"),
        limit.get("power_cap"),
    ):
        found = number(value)
        if found is not None:
            return found
    return None


def parse_amd_smi_metric(text: str) -> list[Record]:
    """``amd-smi metric --json``: one dict per GPU with ``gpu``, ``sclk_mhz`` (GFX
    clock of XCD 0), ``mclk_mhz`` and ``perf_level`` (lower case, e.g. ``auto``)."""
    out = []
    for rec in amd_smi_records(text):
        clock = _lower_keys(rec.get("clock"))
        out.append(
            {
                "gpu": rec.get("gpu"),
                "sclk_mhz": _clk(clock, "gfx_0"),
                "mclk_mhz": _clk(clock, "mem_0"),
                "perf_level": perf_level(rec.get("perf_level")),
            }
        )
    return out


def _clk(clock: Record, domain: str) -> float | int | None:
    return number(_lower_keys(clock.get(domain)).get("clk"))


def perf_level(value: object) -> str | None:
    """``AMDSMI_DEV_PERF_LEVEL_STABLE_PEAK`` / ``STABLE_PEAK`` -> ``stable_peak``."""
    value = clean(value)
    if not isinstance(value, str):
        return None
    return value.removeprefix("AMDSMI_DEV_PERF_LEVEL_").lower()


def parse_amd_smi_firmware(text: str) -> list[Record]:
    """``amd-smi firmware --json``: one dict per GPU with ``gpu`` and ``firmware``
    (``{fw_id: fw_version}``)."""
    out = []
    for rec in amd_smi_records(text):
        fw_list = rec.get("fw_list")
        fw: dict[str, str] = {}
        for entry in fw_list if isinstance(fw_list, list) else []:
            entry = _lower_keys(entry)
            name, version = clean(entry.get("fw_id")), clean(entry.get("fw_version"))
            if name and version is not None:
                fw[str(name)] = str(version)
        out.append({"gpu": rec.get("gpu"), "firmware": fw})
    return out


# --------------------------------------------------------------------------- rocminfo

_AGENT = re.compile(r"^\s*Agent\s+\d+\s*$")
_FIELD = re.compile(r"^\s*([A-Za-z][^:]*?):\s*(.*?)\s*$")


def parse_rocminfo(text: str) -> RocmInfo:
    """``rocminfo``: ``runtime_version``, ``rock_version`` (the amdgpu kernel module,
    from "ROCk module version X is loaded") and ``gpus``: a list of dicts with
    ``architecture`` (``gfx942``), ``model`` (Marketing Name) and ``compute_units``."""
    rock = re.search(r"ROCk module version\s+(\S+)\s+is loaded", text or "")
    runtime = re.search(r"^\s*Runtime Version:\s*(\S+)", text or "", re.MULTILINE)
    gpus = [_rocminfo_gpu(a) for a in _agents(text or "") if a.get("device type") == "GPU"]
    return {
        "runtime_version": runtime.group(1) if runtime else None,
        "rock_version": rock.group(1) if rock else None,
        "gpus": gpus,
    }


def _agents(text: str) -> list[dict[str, str]]:
    """Each agent's fields; the first occurrence of a name wins, so an agent's own
    ``Name`` is kept and the ISA's ``Name`` further down is ignored."""
    agents: list[dict[str, str]] = []
    for line in text.splitlines():
        if _AGENT.match(line):
            agents.append({})
            continue
        m = _FIELD.match(line)
        if agents and m:
            agents[-1].setdefault(m.group(1).strip().lower(), m.group(2))
    return agents


def _rocminfo_gpu(agent: dict[str, str]) -> RocmGpu:
    name = agent.get("name", "")
    cu = number(agent.get("compute unit"))
    return {
        "architecture": name.split(":")[0].lower() if name.lower().startswith("gfx") else None,
        "model": clean(agent.get("marketing name")),
        "compute_units": cu,
    }


# --------------------------------------------------------------------------- nvidia-smi

NVIDIA_QUERY = "name,driver_version,vbios_version,clocks.sm,clocks.mem,power.limit,compute_mode"
_NVIDIA_FIELDS = ("model", "driver_version", "vbios", "sclk_mhz", "mclk_mhz", "power_cap_w")


def parse_nvidia_smi(text: str) -> list[Record]:
    """``nvidia-smi --query-gpu=<NVIDIA_QUERY>[,compute_cap] --format=csv,noheader``:
    one dict per GPU line with ``model``, ``driver_version``, ``vbios``, ``sclk_mhz``,
    ``mclk_mhz``, ``power_cap_w``, ``compute_mode`` and ``architecture`` (``sm_90``
    when the ``compute_cap`` column was asked for, else ``None``)."""
    out = []
    for line in (text or "").splitlines():
        cols = [c.strip() for c in line.split(",")]
        if len(cols) not in (7, 8):
            continue
        rec: Record = dict(zip(_NVIDIA_FIELDS, (clean(c) for c in cols[:6]), strict=True))
        for key in ("sclk_mhz", "mclk_mhz", "power_cap_w"):
            rec[key] = number(rec[key])
        rec["compute_mode"] = clean(cols[6])
        rec["architecture"] = _sm_arch(cols[7]) if len(cols) == 8 else None
        out.append(rec)
    return out


def _sm_arch(compute_cap: str) -> str | None:
    m = re.fullmatch(r"(\d+)\.(\d+)", compute_cap.strip())
    return f"sm_{m.group(1)}{m.group(2)}" if m else None


def parse_nvidia_smi_version(text: str) -> dict[str, str | None]:
    """``nvidia-smi --version``: ``driver_version`` and ``cuda_version`` (the highest
    CUDA the driver supports)."""
    found: dict[str, str | None] = {"driver_version": None, "cuda_version": None}
    for key, label in (("driver_version", "DRIVER version"), ("cuda_version", "CUDA Version")):
        m = re.search(rf"^{label}\s*:\s*(\S+)", text or "", re.MULTILINE | re.IGNORECASE)
        found[key] = m.group(1) if m else None
    return found


# --------------------------------------------------------------------------- misc


def parse_version_header(text: str, prefix: str, extra: str = "TWEAK") -> str | None:
    """``MAJOR.MINOR.PATCH[-EXTRA]`` from a C version header: ``prefix`` is
    ``HIPBLASLT_VERSION_`` (extra ``TWEAK``, the commit) or ``HIP_VERSION_`` (extra
    ``GITHASH``).  ``None`` unless all three numbers are there."""
    parts: dict[str, str] = {}
    for name in ("MAJOR", "MINOR", "PATCH", extra):
        m = re.search(rf"^\s*#define\s+{prefix}{name}\s+(\S+)", text or "", re.MULTILINE)
        if m:
            parts[name] = m.group(1).strip('"')
    if not all(parts.get(n, "").isdigit() for n in ("MAJOR", "MINOR", "PATCH")):
        return None
    version = f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"
    tweak = parts.get(extra, "")
    return f"{version}-{tweak}" if tweak not in ("", "0") else version


def parse_cpuinfo(text: str) -> str | None:
    """The CPU model from ``/proc/cpuinfo`` (x86 ``model name``; else ``Model``)."""
    for label in ("model name", "Model"):
        m = re.search(rf"^{label}\s*:\s*(.+?)\s*$", text or "", re.MULTILINE)
        if m:
            return m.group(1)
    return None


def first_line(text: str | None) -> str | None:
    """The first non-empty line, stripped (``rocm-sdk version``, ``.info/version``)."""
    for line in (text or "").splitlines():
        if line.strip():
            return line.strip()
    return None
