"""Speed of light: per-GPU peak dense matrix throughput and memory bandwidth.

docs/measurement.md §2.7: a per-shape number above the GPU's peak is a measuring error,
not a record.  Host-safe (no torch).  Numbers are the vendors' datasheet figures for
DENSE math (no 2:4 sparsity) at boost clock, in TFLOPS, and HBM bandwidth in GB/s:

* NVIDIA H100 datasheet (nvidia.com/en-us/data-center/h100, "H100 Tensor Core GPU
  Datasheet"): SXM5 BF16 1,979 / FP8 3,958 TFLOPS *with sparsity* -> 989.5 / 1,979
  dense, HBM3 3.35 TB/s; PCIe 1,513 / 3,026 sparse -> 756.5 / 1,513 dense, 2.0 TB/s;
  NVL 1,671 / 3,341 sparse -> 835.5 / 1,670.5 dense, 3.9 TB/s.
* NVIDIA H200 datasheet (nvidia.com/en-us/data-center/h200): SXM same tensor rates as
  H100 SXM, HBM3e 4.8 TB/s; NVL 1,671 / 3,341 sparse -> 835.5 / 1,670.5 dense, 4.8 TB/s.
* AMD Instinct MI300X datasheet (amd.com, "AMD Instinct MI300X Accelerator"): BF16
  1,307.4 / FP8 2,614.9 TFLOPS dense, HBM3 5.3 TB/s.
* AMD Instinct MI325X datasheet: BF16 1,307.4 / FP8 2,614.9 dense, HBM3E 6.0 TB/s.
* AMD Instinct MI350X / MI355X datasheets: BF16 2.3 / 2.5 PFLOPS, FP8 4.6 / 5.0 PFLOPS
  dense (MXFP8 the same), HBM3E 8.0 TB/s.

An architecture name alone (gfx942, gfx950) stands for a family; its peak is the highest
of the family's (gfx942 covers MI300X and MI325X, which differ in bandwidth), so that a
legitimate reading is never called impossible.
"""

from __future__ import annotations

import re

from runner.core.empirical_peak import MARGIN, EmpiricalPeak
from runner.core.errors import SpeedOfLightError

# gpu -> (dense bf16/fp16 TFLOPS, dense fp8 TFLOPS, HBM GB/s)
PEAKS: dict[str, tuple[float, float, float]] = {
    "H100 SXM": (989.5, 1979.0, 3350.0),
    "H100 PCIe": (756.5, 1513.0, 2000.0),
    "H100 NVL": (835.5, 1670.5, 3900.0),
    "H200": (989.5, 1979.0, 4800.0),
    "H200 NVL": (835.5, 1670.5, 4800.0),
    "MI300X": (1307.4, 2614.9, 5300.0),
    "MI325X": (1307.4, 2614.9, 6000.0),
    "MI350X": (2300.0, 4600.0, 8000.0),
    "MI355X": (2500.0, 5000.0, 8000.0),
}

# gpu -> device memory in bytes, as the device reports it (torch.cuda.mem_get_info's
# total; torch's out-of-memory message says "total capacity"): NVIDIA H200 139.81 GiB
# (nvidia-smi says 143771 MiB, the driver keeps the rest), H100 80 GB 79.11 GiB,
# H100 NVL 94 GB 93.1 GiB; AMD's datasheets' HBM in decimal GB: MI300X 192 GB,
# MI325X 256 GB, MI350X / MI355X 288 GB.  A worker's memory is planned against it
# (runner.core.op_info.shape_memory, runner.flow.memory_plan).
DEVICE_MEMORY: dict[str, int] = {
    "H100 SXM": 81008 << 20,
    "H100 PCIe": 81008 << 20,
    "H100 NVL": 95334 << 20,
    "H200": 143165 << 20,
    "H200 NVL": 143165 << 20,
    "MI300X": 192 * 10**9,
    "MI325X": 256 * 10**9,
    "MI350X": 288 * 10**9,
    "MI355X": 288 * 10**9,
}

# Architecture -> the devices it may be.
ARCH_FAMILIES: dict[str, tuple[str, ...]] = {
    "gfx942": ("MI300X", "MI325X"),
    "gfx950": ("MI355X", "MI350X"),
    "sm_90": ("H100 SXM", "H200"),
}

DTYPES: dict[str, int] = {
    **dict.fromkeys(("bf16", "bfloat16", "fp16", "float16", "half"), 0),
    **dict.fromkeys(
        (
            "fp8",
            "float8",
            "e4m3",
            "e5m2",
            "hybrid",
            "mxfp8",
            "float8_e4m3fn",
            "float8_e4m3fnuz",
            "float8_e5m2",
            "float8_e5m2fnuz",
        ),
        1,
    ),
    **dict.fromkeys(("hbm", "bandwidth", "memory", "gb/s", "gbs"), 2),
}


def _family(name: str) -> tuple[str, ...]:
    text = name.strip()
    arch = re.match(r"(gfx\d+|sm_?\d+)", text.lower())
    if arch:
        key = arch.group(1).replace("sm", "sm_").replace("sm__", "sm_")
        return ARCH_FAMILIES.get(key, ())
    upper = text.upper()
    mi = re.search(r"MI3\d\dX", upper)
    if mi:
        key = mi.group(0)
        return (key,) if key in PEAKS else ()
    for model in ("H200", "H100"):
        if model in upper:
            if "NVL" in upper:
                return (f"{model} NVL",)
            if "PCIE" in upper and model == "H100":
                return ("H100 PCIe",)
            return ("H200",) if model == "H200" else ("H100 SXM",)
    return ()


def peak_for(gpu_name_or_arch: str, dtype: str) -> float | None:
    """Dense peak TFLOPS for a matrix dtype ("bf16", "fp8", ...), or HBM GB/s for "hbm";
    None when the GPU or the dtype is not in the table."""
    column = DTYPES.get(dtype.lower().removeprefix("torch."))
    family = _family(gpu_name_or_arch)
    if column is None or not family:
        return None
    return max(PEAKS[g][column] for g in family)


def device_memory_for(gpu_name_or_arch: str) -> int | None:
    """The device memory (bytes) of a GPU name or architecture (``DEVICE_MEMORY``; an
    architecture's family counts at its largest member, so that a shape that fits one
    of its devices is never refused); None for the CPU or an unknown GPU: no limit."""
    family = _family(gpu_name_or_arch)
    if not family:
        return None
    return max(DEVICE_MEMORY[g] for g in family)


def check_speed_of_light(
    value: float,
    gpu: str,
    dtype: str,
    *,
    label: str = "",
    tolerance: float = 0.0,
    empirical: EmpiricalPeak | None = None,
) -> None:
    """Raise SpeedOfLightError when ``value`` (TFLOPS, or GB/s for "hbm") exceeds the
    peak of ``gpu`` for ``dtype`` by more than ``tolerance``; unknown GPUs pass.  An
    ``empirical`` peak measured on this card (``runner.core.empirical_peak``, with its
    margin) tightens the datasheet's where it is lower."""
    datasheet = peak_for(gpu, dtype)
    column = DTYPES.get(dtype.lower().removeprefix("torch."))
    kind = ("bf16", "fp8", "hbm")[column] if column is not None else dtype
    measured = empirical.limit(gpu, kind) if empirical is not None else None
    limits = [x for x in (datasheet, measured) if x is not None]
    if not limits:
        return
    peak = min(limits)
    if value <= peak * (1.0 + tolerance):
        return
    unit = "GB/s" if column == 2 else "TFLOPS"
    where = f" for {label}" if label else ""
    source = (
        f"the reference GEMM measured on this card at BASELINE, {empirical.tflops.get(kind)} "
        f"TFLOPS, plus {MARGIN:.0%}"
        if empirical is not None and peak == measured
        else "vendor datasheet, dense"
    )
    raise SpeedOfLightError(
        f"measured {value:.1f} {unit}{where} exceeds the {dtype} peak of {gpu} "
        f"({peak:.1f} {unit}, {source}). The number is not a record: the "
        "timing missed work (skipped or cached outputs, work outside the timed region) or "
        "the FLOP/byte count is wrong. Check the op's correctness on fresh inputs and its "
        "work formula, then measure again."
    )
