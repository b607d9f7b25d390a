"""A recorded launch of a Triton kernel, specialised and compiled as Triton's JIT would.

A wrapper (``gemm_triton``, ...) is called on meta tensors with its kernel replaced by a
``Recorder``, so the arguments, constexprs and launch options are the ones it launches
with, its config dict included.  ``specialise`` turns the launch into a signature as the
JIT does (an int argument equal to 1 becomes a constexpr, other ints are i32 or i64 by
value, ints and pointers divisible by 16 get ``tt.divisibility``, and on AMD with
buffer ops on, pointers to tensors under 2 GiB get ``tt.pointer_range``); ``compile``
compiles it with ``triton.compile(ASTSource(...), target=GPUTarget(...))``, no GPU needed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import FunctionType
from typing import Protocol

import torch

__all__ = [
    "TARGETS",
    "TRITON_DTYPES",
    "Recorder",
    "Target",
    "amd_knobs",
    "compile_launch",
    "specialise",
]

TRITON_DTYPES = {
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.float32: "fp32",
    torch.int64: "i64",
    torch.float8_e4m3fn: "fp8e4nv",
    torch.float8_e4m3fnuz: "fp8e4b8",
    torch.float8_e5m2: "fp8e5",
    torch.float8_e5m2fnuz: "fp8e5b16",
}


@dataclass(frozen=True)
class Target:
    backend: str
    arch: int | str
    warp_size: int
    e4m3: torch.dtype
    e5m2: torch.dtype
    max_shared: int  # bytes per block: H200 227 KiB (opt-in), MI300 64 KiB, MI355 160 KiB


TARGETS = {
    "sm90": Target("cuda", 90, 32, torch.float8_e4m3fn, torch.float8_e5m2, 232448),
    "gfx942": Target("hip", "gfx942", 64, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, 65536),
    "gfx950": Target("hip", "gfx950", 64, torch.float8_e4m3fn, torch.float8_e5m2, 163840),
}

# A launch as the JIT receives it: positional arguments and keywords.
Launch = tuple[tuple[object, ...], dict[str, object]]


class KernelParam(Protocol):
    """What is read of one parameter of a Triton ``JITFunction`` (``fn.params``)."""

    name: str
    default: object
    has_default: bool
    is_constexpr: bool


class JitKernel(Protocol):
    """What is read of a Triton ``JITFunction``: its Python function and parameters."""

    __name__: str
    fn: FunctionType
    arg_names: list[str]
    params: list[KernelParam]


# Triton's attributes of one parameter: [["tt.divisibility", 16], ...]
Attrs = list[list[object]]


class CompiledMetadata(Protocol):
    shared: int


class CompiledKernel(Protocol):
    """What is read of a Triton ``CompiledKernel``: its assembly and shared memory."""

    asm: dict[str, str]
    metadata: CompiledMetadata


class Recorder:
    """Stands in for a JITFunction: ``kernel[grid](*args, **kwargs)`` records the launch."""

    def __init__(self, fn: JitKernel) -> None:
        self.fn = fn
        self.launches: list[Launch] = []

    def __getitem__(self, grid: object) -> Callable[..., None]:
        def launch(*args: object, **kwargs: object) -> None:
            self.launches.append((args, kwargs))

        return launch


def _pointer_attrs(target: Target) -> list[list[object]]:
    import triton

    divisible: list[list[object]] = [["tt.divisibility", 16]]  # torch allocations: 16-byte aligned
    if target.backend == "hip" and triton.knobs.amd.use_buffer_ops:
        return [*divisible, ["tt.pointer_range", 32]]  # every tensor here is under 2 GiB
    return divisible


def specialise(
    fn: JitKernel, args: tuple[object, ...], kwargs: dict[str, object], target: Target
) -> tuple[dict[str, str], dict[str, object], dict[tuple[int, ...], Attrs], dict[str, object]]:
    """signature, constexprs, attrs and options of a launch, as Triton's JIT makes them."""
    names: list[str] = list(fn.arg_names)
    bound = {p.name: p.default for p in fn.params if p.has_default}  # unpassed: defaults
    bound.update(zip(names, args, strict=False))
    bound.update({k: v for k, v in kwargs.items() if k in names})
    if set(bound) != set(names):
        raise TypeError(f"launch lacks {sorted(set(names) - set(bound))}")
    options = {k: v for k, v in kwargs.items() if k not in names}
    divisible: Attrs = [["tt.divisibility", 16]]
    pointer = _pointer_attrs(target)
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    attrs: dict[tuple[int, ...], Attrs] = {}
    for i, param in enumerate(fn.params):
        value = bound[param.name]
        specialised = not getattr(param, "do_not_specialize", False)
        if (
            param.is_constexpr
            or value is None
            or (type(value) is int and value == 1 and specialised)
        ):
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = "*" + TRITON_DTYPES[value.dtype]
            attrs[(i,)] = pointer
        elif type(value) is bool:
            signature[param.name] = "i1"
        elif type(value) is int:
            signature[param.name] = "i32" if -(2**31) <= value < 2**31 else "i64"
            if value % 16 == 0 and specialised:
                attrs[(i,)] = divisible
        elif type(value) is float:
            signature[param.name] = "fp32"
        else:
            raise TypeError(f"{param.name}: no rule for {type(value).__name__} {value!r}")
    return signature, constexprs, attrs, options


@contextlib.contextmanager
def amd_knobs(knobs: dict[str, object] | None) -> Iterator[None]:
    """``triton.knobs.amd`` set to ``knobs`` for the scope (the knobs a launch had)."""
    import triton

    amd = triton.knobs.amd
    saved = {k: getattr(amd, k) for k in knobs or {}}
    for key, value in (knobs or {}).items():
        setattr(amd, key, value)
    try:
        yield
    finally:
        for key, value in saved.items():
            setattr(amd, key, value)


def compile_launch(
    fn: JitKernel, launch: Launch, target: Target, knobs: dict[str, object] | None = None
) -> tuple[CompiledKernel, dict[str, object]]:
    """The compiled kernel of one recorded launch, and its config: the declared
    constexprs and the launch options (``num_warps``, ``num_stages``...); ``knobs``: the
    AMD compiler knobs in force at the launch."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    with amd_knobs(knobs if target.backend == "hip" else None):
        signature, constexprs, attrs, options = specialise(fn, *launch, target)
        src = ASTSource(fn, signature, constexprs=constexprs, attrs=attrs)
        gpu = GPUTarget(target.backend, target.arch, target.warp_size)
        compiled = triton.compile(src, target=gpu, options=options)
    declared = {p.name for p in fn.params if p.is_constexpr}
    return compiled, {**{k: v for k, v in constexprs.items() if k in declared}, **options}
