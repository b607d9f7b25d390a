"""Which GPU vendor this host has, and the environment that shows a job one GPU: the
pinning that sharded passes, leased rounds and the docker executor share."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

Vendor = Literal["nvidia", "amd"]
ALLOC_CONF_ENV = "PYTORCH_CUDA_ALLOC_CONF"  # PyTorch's caching allocator settings
EXPANDABLE_SEGMENTS = "expandable_segments:True"


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


def allocator_env(vendor: Vendor, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """A GPU worker's caching allocator settings: on NVIDIA, expandable segments
    (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), so that what a serving
    worker hands back after each turn (``runner.worker.bench.serve.device_memory``) leaves the
    process.  With fixed segments one small live tensor pins its whole segment: on one
    H200 (Llama-2-7B shapes) workers kept 13-17 GiB between turns, and one ran out of
    memory with 6.5 GiB allocated beside 12.0 GiB reserved but unused, so a
    tournament's wave held one pair.  Nothing when the variable is set already (the
    user's choice stands) and nothing on AMD (not verified on ROCm here)."""
    environ = os.environ if environ is None else environ
    if vendor != "nvidia" or ALLOC_CONF_ENV in environ:
        return {}
    return {ALLOC_CONF_ENV: EXPANDABLE_SEGMENTS}
