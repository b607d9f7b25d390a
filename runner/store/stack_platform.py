"""The minimal stack's platform layer (docs/primus-turbo.md, "NVIDIA development hosts:
the platform layer").

Upstream Primus-Turbo targets AMD GPUs; on a campaign declared for an NVIDIA GPU
(``--gpu sm90``) workspace mode adds to the stack, never to the kernel files:

* ``primus_turbo/_turbo_campaign_platform.py``: the text of
  ``runner/store/cuda_platform_shim.py`` (OCP FP8, no AMD-only launch options);
* ``primus_turbo/__init__.py``: upstream's (or the stack's trimmed) text with one
  import of that module first, under a marked header.

A campaign declared for ROCm (``gfx...``) or the CPU gets no layer.  ``apply_layer``
returns the record UPSTREAM.yaml keeps (``platform``), which every round's result and
the report repeat as a non-AMD run.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from runner.store import cuda_platform_shim
from runner.store.minimal_stack import Stack
from runner.store.workspace import RECORD, PlatformRecord

PLATFORM_MARK = "PLATFORM LAYER written by turbo-campaign's workspace mode"
SHIM = "primus_turbo/_turbo_campaign_platform.py"
INIT = "primus_turbo/__init__.py"
_IMPORT = "from primus_turbo import _turbo_campaign_platform  # noqa: F401  (platform layer)\n"


def is_cuda_gpu(gpu: str) -> bool:
    """A campaign GPU naming an NVIDIA architecture (sm90, sm100, ...)."""
    return gpu.lower().startswith("sm")


def platform_record(gpu: str) -> PlatformRecord | None:
    """What UPSTREAM.yaml records for a stack on ``gpu``: None on ROCm and the CPU."""
    if not is_cuda_gpu(gpu):
        return None
    return {
        "name": "cuda",
        "gpu": gpu,
        "amd": False,
        "note": "non-AMD run: upstream's AMD-only choices take gfx950's path through "
        f"the stack's platform layer ({SHIM}); the kernel files are upstream's",
        "applied": list(cuda_platform_shim.APPLIED),
        "files": [SHIM, INIT],
    }


def apply_layer(stack: Stack, root: Path, gpu: str) -> PlatformRecord | None:
    """Add the layer for ``gpu`` to ``stack`` (planned from the tree ``root``); returns
    its record, or None (nothing added) where the campaign is not declared for CUDA."""
    record = platform_record(gpu)
    if record is None:
        return None
    shim = Path(cuda_platform_shim.__file__).read_text(encoding="utf-8")
    stack.written[SHIM] = f"# {PLATFORM_MARK}: not upstream's file.\n{shim}"
    init = stack.written.get(INIT)
    if init is None:
        init = (root / INIT).read_text(encoding="utf-8")
        stack.carried = [p for p in stack.carried if p != INIT]
    stack.written[INIT] = (
        f"# {PLATFORM_MARK}: upstream's {INIT} with the platform layer imported first\n"
        f"{_IMPORT}{init}"
    )
    return record


def platform_line(source: Path) -> str | None:
    """One line for a round's record and the report: the layer the workspace ``source``
    records in ``src/UPSTREAM.yaml``; None for a repo-mode source or a stack without it."""
    path = Path(source) / "src" / RECORD
    if not path.is_file():
        return None
    record = yaml.safe_load(path.read_text(encoding="utf-8"))
    layer = record.get("platform") if isinstance(record, dict) else None
    if not isinstance(layer, dict):
        return None
    return f"{layer.get('note', 'non-AMD run')} [{'; '.join(layer.get('applied', []))}]"
