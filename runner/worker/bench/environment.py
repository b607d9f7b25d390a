"""What a worker records about where it ran (``meta.json``): Python, torch and its
HIP/CUDA versions, the device, the host, the device-visibility variables.

Worker-side: torch, never pydantic.
"""

from __future__ import annotations

import os
import platform

from runner.core.pass_meta import PassMeta
from runner.core.spec import VISIBILITY


def environment_meta(device: str) -> PassMeta:
    import torch

    return PassMeta(
        python=platform.python_version(),
        torch=torch.__version__,
        torch_hip=getattr(torch.version, "hip", None),
        torch_cuda=torch.version.cuda,
        device=device,
        host=platform.node(),
        visible_devices={k: os.environ[k] for k in VISIBILITY if k in os.environ},
        gpu_name=torch.cuda.get_device_name(0) if device != "cpu" else None,
    )
