"""docs/reliability.md §8, the finished-output guard: a forward output and an activation
gradient that are ``__torch_dispatch__`` subclasses computing the GEMM when first read
were timed as nearly free (the sampler read them after the clock stopped) and the
real-training step never read ``out`` or ``dgrad``.  Every timed call's outputs must now
be plain ``torch.Tensor`` (a subclass is refused, named), and the real-training step
reads every output and gradient.  One real worker shape on the CPU, the cheat planted
as the target's ``gemm``."""

from __future__ import annotations

import types
from typing import Any

import pytest
import torch
from torch.utils._pytree import tree_map

from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings
from runner.worker.bench.worker_pass import measure_shape
from runner.worker.ops.base import UnfinishedOutput, finished, read_all
from runner.worker.ops.gemm import GemmOp

SHAPE = Shape("tiny-16x32x64", m=16, n=32, k=64)
TIMING = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=2, batch_s=0.005, budget_s=0.05)


class LazyProduct(torch.Tensor):
    """``x @ y^T``, computed when first read (any op on it), not when made."""

    @staticmethod
    def __new__(cls, x: torch.Tensor, y: torch.Tensor) -> LazyProduct:
        made = torch.Tensor._make_wrapper_subclass(
            cls, (x.shape[0], y.shape[0]), dtype=x.dtype, device=x.device
        )
        made.inputs = (x.detach(), y.detach())
        made.value = None
        return made

    def computed(self) -> torch.Tensor:
        if self.value is None:
            x, y = self.inputs
            self.value = x @ y.t()
        return self.value

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        def plain(t: Any) -> Any:
            return t.computed() if isinstance(t, LazyProduct) else t

        return func(*tree_map(plain, args), **tree_map(plain, kwargs or {}))


class LazyGemm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return LazyProduct(a, b)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        a, b = ctx.saved_tensors
        return LazyProduct(g, b.t().contiguous()), g.t() @ a  # dgrad lazy, wgrad plain


def lazy_gemm(a: torch.Tensor, b: torch.Tensor, trans_b: bool = True) -> torch.Tensor:
    out: torch.Tensor = LazyGemm.apply(a, b)
    return out


def _adapter(gemm: Any) -> GemmOp:
    return GemmOp(types.SimpleNamespace(ops=types.SimpleNamespace(gemm=gemm)), {})


def _spec() -> RoundSpec:
    return RoundSpec(
        "t46", 1, "candidate", 0, "quick", "example", "gemm", {}, (SHAPE,), TIMING, device="cpu"
    )


def test_the_planted_cheat_is_right_when_read() -> None:
    """The cheat computes the right values: only the guard can refuse it."""
    a, b = torch.randn(4, 8), torch.randn(3, 8)
    assert torch.allclose(lazy_gemm(a, b) + 0, a @ b.t())


def test_a_lazy_subclass_output_fails_the_timed_shape_named() -> None:
    with pytest.raises(UnfinishedOutput, match=r"finished-output guard.*LazyProduct"):
        measure_shape(_adapter(lazy_gemm), SHAPE, _spec(), "cpu")


def test_the_real_training_step_reads_out_and_dgrad() -> None:
    step = _adapter(lazy_gemm).fresh_step(SHAPE, "cpu", 7)
    with pytest.raises(UnfinishedOutput, match=r"real-training step.*LazyProduct"):
        step.step()


def test_an_honest_gemm_passes_the_guard() -> None:
    result = measure_shape(_adapter(lambda a, b, trans_b: a @ b.t()), SHAPE, _spec(), "cpu")
    assert result["row"]["Check"] == "PASS", result["problems"]
    assert result["raw"]["fresh_step"] is not None


def test_read_all_reads_every_element_and_refuses_meta_tensors() -> None:
    sums = read_all((torch.ones(2, 3), torch.full((4,), 2.0)), "step")
    assert sums.tolist() == [6.0, 8.0]
    with pytest.raises(UnfinishedOutput, match="meta tensor"):
        finished((torch.empty(2, device="meta"),), "timed forward")
    assert finished((torch.ones(1), None), "timed backward")[1] is None
