"""Where a worker pass ran (``META`` in its artifacts folder): Python, torch and its
HIP/CUDA versions, the device, the host, the device-visibility variables, and on a GPU
the device's name.  The worker writes it (``runner.worker.bench.environment``); the host reads
the GPU's name from it to find the device's peak (``runner.measure.passes``).

Standard library only (worker-side safe).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from runner.core.artifact_names import META
from runner.core.files import read_json


def _text(value: object) -> str | None:
    return str(value) if value is not None and value != "" else None


@dataclass(frozen=True)
class PassMeta:
    """One pass's ``meta.json``; a field its writer did not know is None."""

    python: str | None = None
    torch: str | None = None
    torch_hip: str | None = None
    torch_cuda: str | None = None
    device: str | None = None
    host: str | None = None
    visible_devices: dict[str, str] = field(default_factory=dict)
    gpu_name: str | None = None  # None on the CPU

    def to_dict(self) -> dict[str, object]:
        """The JSON object, ``gpu_name`` only on a GPU (as written since the record began)."""
        out = asdict(self)
        if self.gpu_name is None:
            del out["gpu_name"]
        return out

    @classmethod
    def from_dict(cls, doc: object) -> PassMeta | None:
        """The record in ``doc`` (a parsed ``META``), or None when it is not an object."""
        if not isinstance(doc, Mapping):
            return None
        visible = doc.get("visible_devices")
        return cls(
            python=_text(doc.get("python")),
            torch=_text(doc.get("torch")),
            torch_hip=_text(doc.get("torch_hip")),
            torch_cuda=_text(doc.get("torch_cuda")),
            device=_text(doc.get("device")),
            host=_text(doc.get("host")),
            visible_devices=(
                {str(k): str(v) for k, v in visible.items()} if isinstance(visible, Mapping) else {}
            ),
            gpu_name=_text(doc.get("gpu_name")),
        )


def read_meta(folder: Path) -> PassMeta | None:
    """The ``meta.json`` a pass left in ``folder`` (None: missing or unreadable)."""
    return PassMeta.from_dict(read_json(folder / META))


__all__ = ["PassMeta", "read_meta"]
