"""Which GPU the kernels launch on, and the launch configuration that fits it.

The config dicts of the kernel modules are tuned on an NVIDIA H200 (228 KiB of shared
memory per SM).  An MI300 (gfx942) has 64 KiB of LDS per CU: a configuration whose
software pipeline needs more fails to launch there (``OutOfResources``), so it runs with
at most two stages.  gfx950 (160 KiB) and NVIDIA parts take the config as it is.
"""

from __future__ import annotations

import torch

__all__ = ["gpu_arch", "launch_config"]

_MAX_STAGES = {"gfx942": 2}


def gpu_arch() -> str:
    """``gfx942``, ``gfx950``... on ROCm, ``sm90``... on CUDA, ``""`` without a GPU."""
    if not torch.cuda.is_available():
        return ""
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    if torch.version.hip is not None:
        return str(getattr(props, "gcnArchName", "")).split(":")[0]
    return f"sm{props.major}{props.minor}"


def launch_config(config: dict[str, int]) -> dict[str, int]:
    """``config`` with ``num_stages`` capped where the GPU's shared memory needs it."""
    cap = _MAX_STAGES.get(gpu_arch())
    if cap is None or config.get("num_stages", 0) <= cap:
        return dict(config)
    return {**config, "num_stages": cap}
