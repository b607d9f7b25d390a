"""Which GPU vendor this host has, and the environment that shows a job one GPU: the
pinning that sharded passes, leased rounds and the docker executor share."""

from __future__ import annotations

import os
from typing import Literal

Vendor = Literal["nvidia", "amd"]


def detect_vendor() -> Vendor:
    """``amd`` when the ROCm kernel driver is there (``/dev/kfd``), else ``nvidia``."""
    return "amd" if os.path.exists("/dev/kfd") else "nvidia"


def gpu_env(gpu: int, vendor: Vendor) -> dict[str, str]:
    """Environment that shows a worker only physical GPU ``gpu``.

    NVIDIA: ``CUDA_VISIBLE_DEVICES=<gpu>``.  AMD: ``ROCR_VISIBLE_DEVICES=<gpu>`` selects
    the physical GPU and renumbers it 0 for everything above ROCr, so HIP's own filters
    (``HIP_VISIBLE_DEVICES``, and ``CUDA_VISIBLE_DEVICES`` which HIP also reads) must be
    ``0``: setting all three to ``<gpu>`` would hide every GPU but GPU 0.
    """
    if vendor == "nvidia":
        return {"CUDA_VISIBLE_DEVICES": str(gpu)}
    return {
        "ROCR_VISIBLE_DEVICES": str(gpu),
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
    }
