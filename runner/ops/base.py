"""Worker-side op adapter base: builds seeded inputs, runs the target's forward and
backward, computes the float32 reference and the correctness figures.

An adapter turns (target API, shape, options) into a ``Case``: closures that the
timing engine calls and a ``check`` that the worker calls on fresh inputs.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from runner.ops.info import op_info


@dataclass
class CheckResult:
    """Correctness of one call on one input set."""

    ok: bool
    figures: dict[str, float]  # e.g. out_snr, da_snr, db_snr (dB)
    problems: list[str] = field(default_factory=list)


@dataclass
class Case:
    """Timed closures over one fixed input set (the benchmark idiom)."""

    forward: Callable[[], Any]
    backward: Callable[[], Any] | None
    fwd_flops: float
    bwd_flops: float
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0


def snr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    """10*log10(|ref|^2 / |out-ref|^2) in float64; +inf when identical."""
    ref64, out64 = ref.detach().double(), out.detach().double()
    noise = (ref64 - out64).pow(2).sum().item()
    signal = ref64.pow(2).sum().item()
    if noise == 0.0:
        return float("inf")
    return 10.0 * torch.log10(torch.tensor(signal / noise)).item()


def input_problems(
    names: tuple[str, ...], inputs: tuple[torch.Tensor, ...], pristine: list[torch.Tensor]
) -> list[str]:
    """One problem per input the call wrote into (compared with its pristine copy)."""
    return [
        f"the call wrote into its input {n}"
        for n, t, p in zip(names, inputs, pristine, strict=True)
        if not torch.equal(t.detach(), p)
    ]


class OpAdapter:
    """Base class; subclasses set ``name`` and implement the hooks."""

    name = ""

    def __init__(self, api: Any, options: dict[str, Any]) -> None:
        self.api = api
        self.options = options
        self.info = op_info(self.name)

    def case(self, shape: Any, device: str, seed: int) -> Case:
        raise NotImplementedError

    def check(self, shape: Any, device: str, seed: int) -> CheckResult:
        raise NotImplementedError


def load_adapter(name: str, api: Any, options: dict[str, Any]) -> OpAdapter:
    """Instantiate the worker-side adapter registered for op ``name``."""
    module_name, cls_name = op_info(name).adapter.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    adapter: OpAdapter = cls(api, options)
    return adapter
