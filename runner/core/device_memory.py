"""Device memory both sides speak of: the record a worker leaves when its device ran
out of memory (``OUT_OF_MEMORY`` in its artifacts folder), the host's reading of it into
``DeviceOutOfMemory`` (exit 6: infrastructure, never a wrong result of the code under
test), and figures in GiB.

Standard library only (worker-side safe)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from runner.core.artifact_names import OUT_OF_MEMORY
from runner.core.errors import DeviceOutOfMemory
from runner.core.files import write_json_atomic

GIB = float(1 << 30)
_UNITS = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# torch: "Tried to allocate 14.00 GiB. GPU 0 has a total capacity of 139.81 GiB ..."
_ASKED = re.compile(r"Tried to allocate ([0-9.]+) ?([KMGT]?i?B)", re.IGNORECASE)
_TOTAL = re.compile(r"total capacity of ([0-9.]+) ?([KMGT]?i?B)", re.IGNORECASE)


def gib(n: float | None) -> str:
    """``n`` bytes as "12.34 GiB" ("an unknown amount" for None)."""
    return "an unknown amount" if n is None else f"{n / GIB:.2f} GiB"


def _bytes(pattern: re.Pattern[str], message: str) -> int | None:
    found = pattern.search(message)
    if not found:
        return None
    return int(float(found.group(1)) * _UNITS[found.group(2)[0].upper()])


def oom_record(shape: str, message: str, total: int | None) -> dict[str, Any]:
    """What a worker writes when shape ``shape`` ran out of device memory: the bytes
    the failing allocation asked for (read from the allocator's message) and the
    device's total (``total``, else read from the message)."""
    return {
        "shape": shape,
        "asked_bytes": _bytes(_ASKED, message),
        "total_bytes": total if total is not None else _bytes(_TOTAL, message),
        "message": message.strip().splitlines()[0][:500] if message.strip() else "",
    }


def write_oom(out_dir: Path, record: dict[str, Any]) -> None:
    write_json_atomic(out_dir / OUT_OF_MEMORY, record)


def oom_message(worker: str, record: dict[str, Any]) -> str:
    """The user's message for an out-of-memory record of ``worker``."""
    return (
        f"worker {worker} ran out of device memory on shape {record.get('shape')}: it asked "
        f"for {gib(record.get('asked_bytes'))} on a device of {gib(record.get('total_bytes'))} "
        "total. This is the device's capacity, not a wrong result of the code under test: "
        "leave the shape out of the campaign (its shape set or held-out shapes), free the "
        "device of other work, or run on a device with more memory"
    )


def oom_error(out_dir: Path, worker: str, log_path: Path | None = None) -> DeviceOutOfMemory | None:
    """``DeviceOutOfMemory`` when the worker whose artifacts are in ``out_dir`` ran out
    of device memory (it left ``OUT_OF_MEMORY``), else None."""
    path = out_dir / OUT_OF_MEMORY
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    if not isinstance(record, dict):
        record = {}
    return DeviceOutOfMemory(oom_message(worker, record), log_path, record=record)
