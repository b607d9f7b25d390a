"""Device memory both sides speak of: the record a worker leaves when its device ran
out of memory (``OUT_OF_MEMORY`` in its artifacts folder), the host's reading of it into
``DeviceOutOfMemory`` (exit 6: infrastructure, never a wrong result of the code under
test), a paired session's memory log (``MEMORY_LOG``, typed as ``MemoryLog``), and
figures in GiB.

Standard library only (worker-side safe)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import TypedDict, cast

from runner.core.artifact_names import OUT_OF_MEMORY
from runner.core.errors import DeviceOutOfMemory
from runner.core.files import read_json, write_json_atomic

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


class OomRecord(TypedDict, total=False):
    """``OUT_OF_MEMORY``: the shape, the bytes its allocation asked for and the device's
    total (None: not in the message), the allocator's message."""

    shape: str
    asked_bytes: int | None
    total_bytes: int | None
    message: str


def oom_record(shape: str, message: str, total: int | None) -> OomRecord:
    """What a worker writes when shape ``shape`` ran out of device memory: the bytes
    the failing allocation asked for (read from the allocator's message) and the
    device's total (``total``, else read from the message)."""
    return {
        "shape": shape,
        "asked_bytes": _bytes(_ASKED, message),
        "total_bytes": total if total is not None else _bytes(_TOTAL, message),
        "message": message.strip().splitlines()[0][:500] if message.strip() else "",
    }


def write_oom(out_dir: Path, record: OomRecord) -> None:
    write_json_atomic(out_dir / OUT_OF_MEMORY, record)


def oom_message(worker: str, record: OomRecord) -> str:
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
    found = read_json(path)
    record: OomRecord = cast("OomRecord", found) if isinstance(found, dict) else {}
    return DeviceOutOfMemory(oom_message(worker, record), log_path, record=record)


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) else None


@dataclass(frozen=True)
class WorkerMemory:
    """One worker's figures over a paired session (bytes; None where the log has no
    integer): the most it reserved preparing (``prepare``) and in a turn
    (``reserved``), the most it held between turns (``held``), the least free device
    memory it saw (``free``) and the device's ``total``."""

    prepare: int | None = None
    reserved: int | None = None
    held: int | None = None
    free: int | None = None
    total: int | None = None

    def to_dict(self) -> dict[str, int]:
        """The log's row: the figures known, None left out."""
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, doc: object) -> WorkerMemory:
        """A row as the log gives it; a figure that is not an integer (or a row that is
        not an object) reads as None."""
        row = doc if isinstance(doc, Mapping) else {}
        return cls(**{f.name: _int_or_none(row.get(f.name)) for f in fields(cls)})


@dataclass(frozen=True)
class ShapeMemory:
    """One shape's row of the log: the op's figure for one worker with the session's
    pool (``estimate``, bytes) and, where a GPU worker measured it, the most it
    allocated preparing that shape (``measured``; None on the CPU)."""

    estimate: int
    measured: int | None = None

    def to_dict(self) -> dict[str, int]:
        """The log's row: ``measured`` only where measured."""
        row = {"estimate": self.estimate}
        if self.measured is not None:
            row["measured"] = self.measured
        return row


@dataclass(frozen=True)
class MemoryLog:
    """A paired session's memory log (``MEMORY_LOG``, none on the CPU): the machine it
    ran on (``host``), its roles, each worker's buffer-pool members (``pool``), per
    worker its figures and per shape the op's figure beside the measured peak.  The
    next session on the same machine sizes its first wave from it
    (``runner.measure.waves.prior_wave``)."""

    host: str
    roles: int  # 0 where the log does not say
    pool: int | None = None
    workers: dict[str, WorkerMemory] = field(default_factory=dict)
    shapes: dict[str, ShapeMemory] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        """The JSON document of the log."""
        return {
            "host": self.host,
            "roles": self.roles,
            "workers": {name: w.to_dict() for name, w in self.workers.items()},
            "pool": self.pool,
            "shapes": {label: s.to_dict() for label, s in self.shapes.items()},
        }

    @classmethod
    def from_dict(cls, doc: object) -> MemoryLog | None:
        """The log in ``doc`` (a parsed ``MEMORY_LOG``), or None when it is not an object.
        Read leniently, so that a partial or malformed log assumes nothing: a host
        that is not a string reads as "" (no machine's), roles that are not an integer
        as 0, a worker row without integer ``free``, ``reserved`` and ``held`` stays
        (with None there, so it sizes no wave), and a shapes table with any row
        lacking a numeric ``estimate`` reads as empty (no per-shape figures kept)."""
        if not isinstance(doc, Mapping):
            return None
        host = doc.get("host")
        roles = doc.get("roles")
        workers = doc.get("workers")
        rows = workers if isinstance(workers, Mapping) else {}
        return cls(
            host=host if isinstance(host, str) else "",
            roles=roles if isinstance(roles, int) else 0,
            pool=_int_or_none(doc.get("pool")),
            workers={str(name): WorkerMemory.from_dict(row) for name, row in rows.items()},
            shapes=_shapes(doc.get("shapes")),
        )


def _shapes(doc: object) -> dict[str, ShapeMemory]:
    """The log's shapes table, or empty when any row lacks a numeric ``estimate``."""
    if not isinstance(doc, Mapping):
        return {}
    out: dict[str, ShapeMemory] = {}
    for label, row in doc.items():
        if not isinstance(row, Mapping):
            return {}
        try:
            estimate = int(row["estimate"])
        except (KeyError, TypeError, ValueError, OverflowError):
            return {}
        out[str(label)] = ShapeMemory(estimate, _int_or_none(row.get("measured")))
    return out
