"""What a worker loaded (``LOADED`` in its artifacts folder): the files it imported from
the tree under test and from the harness, each with the git blob id of its bytes, as of
each phase of its pass ("load": right after the target's import; "end": when the pass is
done).  The worker writes it (``runner.worker.bench.provenance.record_loaded``); the host
compares it with each role's own files (``runner.round.tamper_check``).

Standard library only (worker-side safe).  The JSON keeps one flat object, as written
since the record began: ``role``, ``harness_root``, then per phase ``<phase>`` (the tree
under test) and ``harness_<phase>``: ``{relative path: blob id, or null: gone}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.artifact_names import LOADED
from runner.core.files import read_json, write_json_atomic

Blobs = dict[str, str | None]  # a file, relative to its root -> its blob id (None: gone)
PHASES = ("load", "end")
HARNESS_PREFIX = "harness_"


def _blobs(doc: object) -> Blobs:
    if not isinstance(doc, Mapping):
        return {}
    return {str(k): (str(v) if v is not None else None) for k, v in doc.items()}


@dataclass
class LoadedRecord:
    """One worker's record: its ``role``, the harness folder it ran (``harness_root``),
    and per phase what it loaded from the tree under test (``tree``) and the harness
    (``harness``)."""

    role: str
    harness_root: str
    tree: dict[str, Blobs] = field(default_factory=dict)
    harness: dict[str, Blobs] = field(default_factory=dict)

    def loaded(self, phase: str, *, harness: bool = False) -> Blobs:
        """What the worker loaded as of ``phase`` (empty: that phase not recorded)."""
        return (self.harness if harness else self.tree).get(phase, {})

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"role": self.role, "harness_root": self.harness_root}
        for phase, files in self.tree.items():
            out[phase] = dict(files)
        for phase, files in self.harness.items():
            out[HARNESS_PREFIX + phase] = dict(files)
        return out

    @classmethod
    def from_dict(cls, doc: object) -> LoadedRecord | None:
        """The record in ``doc`` (a parsed ``LOADED``), or None when it is not one."""
        if not isinstance(doc, Mapping) or not isinstance(doc.get("role"), str):
            return None
        return cls(
            role=str(doc["role"]),
            harness_root=str(doc.get("harness_root") or ""),
            tree={p: _blobs(doc[p]) for p in PHASES if p in doc},
            harness={
                p: _blobs(doc[HARNESS_PREFIX + p]) for p in PHASES if HARNESS_PREFIX + p in doc
            },
        )


def read_loaded(folder: Path) -> LoadedRecord | None:
    """The record a worker left in ``folder`` (None: missing, unreadable, not one)."""
    return LoadedRecord.from_dict(read_json(folder / LOADED))


def write_loaded(folder: Path, record: LoadedRecord) -> None:
    write_json_atomic(folder / LOADED, record.to_dict())


__all__ = ["PHASES", "Blobs", "LoadedRecord", "read_loaded", "write_loaded"]
