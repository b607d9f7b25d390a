"""The timed region marked for a profiler: ``campaign profile`` profiles what the gate
times, not the harness around it (the correctness check's float32 reference GEMMs, the
input draws, the state probe).

When ``TURBO_CAMPAIGN_PROFILE_RANGE`` names a range, every timed forward or backward
(``runner.worker.bench.worker_pass.time_case``) runs inside a range of that name: an NVTX
push/pop range on a CUDA or HIP device (Nsight Compute keeps only kernels inside it with
``--nvtx --nvtx-include NAME/``) and a ``torch.profiler.record_function`` range, which
``runner.worker.analyze.torch_profile`` uses to keep only the operators inside it.  Unset (every
measured round), this costs nothing: no range is opened.

Imports torch only when a range is asked for (inside a worker).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

RANGE_ENV = "TURBO_CAMPAIGN_PROFILE_RANGE"
RANGE_NAME = "campaign-timed"


@contextmanager
def profiled_region(device: str) -> Iterator[None]:
    """The named range around one timed measurement, when a profiler asked for it."""
    name = os.environ.get(RANGE_ENV, "")
    if not name:
        yield
        return
    import torch

    nvtx = device.startswith("cuda") and torch.cuda.is_available()
    with torch.profiler.record_function(name):
        if nvtx:
            torch.cuda.nvtx.range_push(name)
        try:
            yield
        finally:
            if nvtx:
                torch.cuda.nvtx.range_pop()
