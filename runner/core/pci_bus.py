"""Which AMD card is which, by PCI bus id: the one name that ROCr/HIP, the kernel's render
nodes and amd-smi agree on.

amd-smi numbers GPUs its own way, and on some hosts (MI350X in SPX/NPS1 modes) its
index is not HIP's, so ``amd-smi metric`` entry N may be another card than HIP device N.
ROCr enumerates GPUs in KFD topology node order (``/sys/devices/virtual/kfd/kfd/
topology/nodes/<N>``), and each node's ``properties`` give its PCI ``domain`` and
``location_id`` (``bus << 8 | device << 3 | function``) beside its ``drm_render_minor``.
So a lease's GPU index g (ROCr's physical index, ``ROCR_VISIBLE_DEVICES=g``) has one bus
id, one ``/dev/dri/renderD<minor>`` (docker ``--device``) and one amd-smi entry (the one
whose ``bdf`` is that bus id, from ``amd-smi list --json``).  Stdlib only: the worker
(clocks, thermal) and the host (docker executor) both read it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

KFD_TOPOLOGY = "/sys/devices/virtual/kfd/kfd/topology/nodes"
AMD_SMI_LIST_CMD = ("amd-smi", "list", "--json")
ROCR_VISIBLE = "ROCR_VISIBLE_DEVICES"
HIP_VISIBLE = ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

_BDF = re.compile(r"^(?:([0-9a-fA-F]{1,8}):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])$")


@dataclass(frozen=True)
class KfdGpu:
    """One GPU node of the KFD topology, in ROCr's order (``index``)."""

    index: int
    node: int
    bus_id: str  # "0000:c0:00.0"
    render_minor: int | None
    lds_kib: int | None


def normalize_bdf(text: str) -> str | None:
    """``"0000:c0:00.0"`` from ``"0000:C0:00.0"``, ``"c0:00.0"``; None when not a bus id."""
    match = _BDF.match(str(text).strip())
    if match is None:
        return None
    domain, bus, dev, fn = match.groups()
    return f"{int(domain or '0', 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn)}"


def bus_id_from_location(domain: int, location_id: int) -> str:
    """The bus id of a KFD node: ``location_id`` is ``bus << 8 | device << 3 | function``."""
    bus, devfn = (location_id >> 8) & 0xFF, location_id & 0xFF
    return f"{domain:04x}:{bus:02x}:{devfn >> 3:02x}.{devfn & 0x7}"


def node_properties(path: Path) -> dict[str, int]:
    """The integer ``key value`` lines of a KFD node's ``properties`` file."""
    props: dict[str, int] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, _, value = line.strip().partition(" ")
        if value.strip().lstrip("-").isdigit():
            props[key] = int(value)
    return props


def kfd_gpus(topology_root: str | Path = KFD_TOPOLOGY) -> list[KfdGpu]:
    """The GPU nodes (non-zero ``gpu_id``) of the KFD topology in node-number order, the
    order ROCr enumerates them; ``[]`` when there is no topology (no amdgpu driver)."""
    root = Path(topology_root)
    if not root.is_dir():
        return []
    nodes = sorted((p for p in root.iterdir() if p.name.isdigit()), key=lambda p: int(p.name))
    gpus: list[KfdGpu] = []
    for node in nodes:
        props = node_properties(node / "properties")
        if (node / "gpu_id").is_file():
            props["gpu_id"] = int((node / "gpu_id").read_text(encoding="utf-8").strip() or 0)
        if props.get("gpu_id", 0) == 0:
            continue
        bus = bus_id_from_location(props.get("domain", 0), props.get("location_id", 0))
        gpus.append(
            KfdGpu(
                len(gpus),
                int(node.name),
                bus,
                props.get("drm_render_minor"),
                props.get("lds_size_in_kb"),
            )
        )
    return gpus


def _records(text: str) -> list[dict[str, object]]:
    """amd-smi's per-GPU JSON records: a bare list (amd-smi 24.x, ROCm 6.1-6.3) or
    ``{"gpu_data": [...]}`` (later releases)."""
    data = json.loads(text)
    items = data.get("gpu_data", []) if isinstance(data, dict) else data
    return [r for r in items if isinstance(r, dict)] if isinstance(items, list) else []


def parse_amd_smi_list(text: str) -> dict[str, int]:
    """Bus id -> amd-smi's GPU index, from ``amd-smi list --json`` (each record has
    ``gpu`` and ``bdf``; ``uuid``, ``kfd_id``, ``node_id``, ``partition_id`` beside)."""
    found: dict[str, int] = {}
    for rec in _records(text):
        bus = normalize_bdf(str(rec.get("bdf", "")))
        gpu = rec.get("gpu")
        if bus is not None and isinstance(gpu, int) and not isinstance(gpu, bool):
            found[bus] = gpu
    return found


def amd_smi_records_by_index(text: str) -> dict[int, dict[str, object]]:
    """amd-smi's per-GPU records (``metric``, ``static``) by their ``gpu`` field."""
    out: dict[int, dict[str, object]] = {}
    for rec in _records(text):
        gpu = rec.get("gpu")
        if isinstance(gpu, int) and not isinstance(gpu, bool):
            out[gpu] = rec
    return out


def rocr_physical_index(index: int, environ: Mapping[str, str] | None = None) -> int | None:
    """ROCr's physical index of HIP device ``index`` in this process: HIP's filters
    (``HIP_VISIBLE_DEVICES``, then ``CUDA_VISIBLE_DEVICES``) pick among what
    ``ROCR_VISIBLE_DEVICES`` shows, each renumbered from 0.  None when a list names a
    GPU by UUID or is shorter than the index (the card cannot be told then)."""
    env = os.environ if environ is None else environ
    position = index
    for var in HIP_VISIBLE:
        listed = _visible(env.get(var))
        if listed is not None:
            if position >= len(listed) or not listed[position].isdigit():
                return None
            position = int(listed[position])
            break
    rocr = _visible(env.get(ROCR_VISIBLE))
    if rocr is None:
        return position
    if position >= len(rocr) or not rocr[position].isdigit():
        return None
    return int(rocr[position])


def _visible(value: str | None) -> list[str] | None:
    if value is None or not value.strip():
        return None
    return [v.strip() for v in value.split(",") if v.strip()]
