"""A worker's device running out of memory: the record it leaves for the host
(``runner.core.device_memory``) and the error that stops it.  Worker-side (torch)."""

from __future__ import annotations

from pathlib import Path

from runner.core.device_memory import oom_record, write_oom


class DeviceMemoryExhausted(RuntimeError):
    """The device ran out of memory: the worker stops (the round FAILs as an
    infrastructure failure, ``runner.core.errors.DeviceOutOfMemory`` on the host)
    instead of writing FAIL rows that would read as wrong results of the code under
    test."""


def out_of_memory(exc: BaseException, shape: str = "", out_dir: Path | None = None) -> None:
    """Raise DeviceMemoryExhausted when ``exc`` is the device running out of memory;
    with ``out_dir``, first leave the record the host reads (``OUT_OF_MEMORY``: the shape,
    the bytes the allocation asked for, the device's total)."""
    import torch

    if isinstance(exc, torch.OutOfMemoryError):
        if out_dir is not None:
            total = None
            if torch.cuda.is_available():
                total = int(torch.cuda.mem_get_info()[1])
            write_oom(out_dir, oom_record(shape, str(exc), total))
        raise DeviceMemoryExhausted(
            f"out of device memory, not a wrong result of the code under test: {exc}"
        ) from exc


def release_cached(device: str) -> None:
    """Hand the allocator's cached blocks back to the device (a GPU; nothing on the CPU):
    after a correctness check its float32 reference is dropped, and the workers that
    prepare side by side share the device (``runner.core.op_info.ShapeMemory``: a worker
    keeps its pool, a check's work only while it runs)."""
    if device == "cpu":
        return
    import torch

    torch.cuda.empty_cache()
