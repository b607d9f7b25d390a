"""docs/reliability.md §8: the state fingerprint took any module global with ``data_ptr`` and
``_version`` for a tensor and called ``data_ptr()``.  A tensor-subclass *class* held as a
module global (as FP8 libraries define their scaled-tensor types) has both as class
attributes, the unbound call raised, and the worker FAILed the shape of honest code.
Only instances of ``torch.Tensor`` are read as tensors now."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest
import torch

from runner.worker.bench.statecheck import state_fingerprint, stateful_probe


class ScaledTensor(torch.Tensor):
    """A tensor subclass as an FP8 library defines one (codes with a scale)."""

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        return super().__torch_function__(func, types, args, kwargs or {})


def _package(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    package = types.ModuleType("rt_subclass_pkg")
    package.ScaledTensor = ScaledTensor  # type: ignore[attr-defined]  # the class itself
    package.TYPES = {"fp8": ScaledTensor}  # type: ignore[attr-defined]  # and held in a dict
    package.scale = torch.ones(2)  # type: ignore[attr-defined]  # a real tensor beside it
    monkeypatch.setitem(sys.modules, "rt_subclass_pkg", package)
    return package


def test_a_tensor_subclass_class_as_a_module_global_is_not_read_as_a_tensor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = _package(monkeypatch)
    prints = state_fingerprint("rt_subclass_pkg")
    assert prints["rt_subclass_pkg.scale"][0] == "tensor"  # instances still are
    assert prints.get("rt_subclass_pkg.ScaledTensor", ("",))[0] != "tensor"
    package.scale.add_(1.0)  # a write to the real tensor still shows
    assert (
        state_fingerprint("rt_subclass_pkg")["rt_subclass_pkg.scale"]
        != prints["rt_subclass_pkg.scale"]
    )


def test_the_state_probe_passes_an_op_whose_package_holds_a_subclass_class(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    package = _package(monkeypatch)
    w = torch.randn(4, 8)

    class Adapter:
        api = package

    def step() -> None:
        torch.randn(4, 8) @ w.t()

    result = stateful_probe(Adapter(), None, "cpu", None, step)
    assert result == {"stateful": False, "written": []}
