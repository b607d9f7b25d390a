"""What a worker records about where it ran (``meta.json``): Python, torch and its
HIP/CUDA versions, the device, the host, the device-visibility variables.

Worker-side: torch, never pydantic.
"""

from __future__ import annotations

import os
import platform
from typing import Any

from runner.core.spec import VISIBILITY


def environment_meta(device: str) -> dict[str, Any]:
    import torch

    meta: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_hip": getattr(torch.version, "hip", None),
        "torch_cuda": torch.version.cuda,
        "device": device,
        "host": platform.node(),
        "visible_devices": {k: os.environ[k] for k in VISIBILITY if k in os.environ},
    }
    if device != "cpu":
        meta["gpu_name"] = torch.cuda.get_device_name(0)
    return meta
