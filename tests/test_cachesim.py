"""runner.worker.cachesim: the 8-step cache hit-rate simulation (docs/protocol.md §8.4).

Two tiny real ops with caches are written here: a legal W1 weight cache (quantised
weight keyed on id(w)+w._version+shape) and an illegal W2 activation cache keyed on
id(a).  The W2 tests also document why the static audit rejects W2: CPython reuses a
freed object's address, so an id()-keyed cache returns stale results for new tensors.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import torch

from runner.worker.cachesim import CacheProbe, CountingDict, SimResult, simulate_training_steps

M, N, K = 16, 8, 32


def fake_quant(t: torch.Tensor) -> torch.Tensor:
    """Per-tensor int8-style fake quantisation: deterministic and visibly lossy."""
    scale = t.detach().float().abs().amax().clamp(min=1e-6) / 127
    return ((t.detach().float() / scale).round().clamp(-127, 127) * scale).to(t.dtype)


def reference(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return fake_quant(a) @ fake_quant(w).t()


class WeightCachedGemm:
    """W1: the quantised weight cached on (id(w), w._version, shape); forward misses after
    each optimiser update, backward (same step, same version) hits."""

    def __init__(self, cache: dict[Any, torch.Tensor], with_version: bool = True) -> None:
        self.cache = cache
        self.with_version = with_version

    def quant_weight(self, w: torch.Tensor) -> torch.Tensor:
        key = (id(w), w._version, tuple(w.shape)) if self.with_version else (id(w), w.shape)
        if key in self.cache:
            return self.cache[key]
        self.cache.clear()
        w_q = self.cache[key] = fake_quant(w)  # not `return self.cache[key]`: a counted hit
        return w_q

    def __call__(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        op = self

        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx: Any, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
                ctx.save_for_backward(a, w)
                return fake_quant(a) @ op.quant_weight(w).t()

            @staticmethod
            def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                a, w = ctx.saved_tensors
                return grad_out @ op.quant_weight(w), grad_out.t() @ fake_quant(a)

        out: torch.Tensor = Fn.apply(a, w)
        return out


class ActivationCachedGemm:
    """W2 (forbidden): the quantised activation cached on id(a), looked up in forward."""

    def __init__(self, cache: dict[int, torch.Tensor]) -> None:
        self.cache = cache
        self.seen_ids: list[int] = []

    def quant_act(self, a: torch.Tensor) -> torch.Tensor:
        self.seen_ids.append(id(a))
        hit = self.cache.get(id(a))
        if hit is None:
            hit = self.cache[id(a)] = fake_quant(a)
        return hit

    def __call__(self, a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        a_q = self.quant_act(a)
        w_q = w + (fake_quant(w) - w).detach()  # straight-through: the weight gets a grad
        return a_q @ w_q.t()


def run(
    op: Callable[[torch.Tensor, torch.Tensor], torch.Tensor], probe: CacheProbe, **kw: Any
) -> SimResult:
    return simulate_training_steps(
        op, m=M, n=N, k=K, dtype=torch.float32, probe=probe, reference=reference, **kw
    )


def test_data_add_does_not_bump_version_but_add_does() -> None:
    # why the simulation updates with w.add_ under no_grad (as torch.optim does)
    w = torch.nn.Parameter(torch.ones(2, 2))
    with torch.no_grad():
        w.data.add_(1.0)
    assert w._version == 0  # a _version-keyed cache would not notice this update
    with torch.no_grad():
        w.add_(1.0)
    assert w._version == 1


def test_w1_weight_cache_passes_with_one_backward_hit_per_step() -> None:
    probe = CacheProbe()
    op = WeightCachedGemm(probe.watch(kind="weight"))
    result = run(op, probe)
    assert result.passes, result.problems()
    assert [s.fwd_weight_hits for s in result.steps] == [0] * 8  # new _version each step
    assert [s.bwd_weight_hits for s in result.steps] == [1] * 8
    assert result.per_step == [(1, 0)] * 8
    assert [s.weight_version for s in result.steps] == list(range(8))
    assert result.mismatched_steps == []
    trace = result.trace_markdown()
    assert trace.count("\n| ") == 4  # four step rows after the header
    assert "| 3 | 3 | 0/1 | 0/0 |" in trace
    assert trace.endswith("fresh tensors, 8 steps: PASS")
    json.dumps(result.to_dict())


def test_weight_cache_without_version_serves_stale_weights() -> None:
    probe = CacheProbe()
    op = WeightCachedGemm(probe.watch(kind="weight"), with_version=False)
    result = run(op, probe)
    assert [s.fwd_weight_hits for s in result.steps[1:]] == [1] * 7  # hits after updates
    assert result.mismatched_steps == list(range(1, 8))  # ... with the old weight
    assert not result.passes


def test_w2_hits_in_the_benchmark_idiom_only() -> None:
    probe = CacheProbe()
    op = ActivationCachedGemm(probe.watch(kind="activation"))
    idiom = run(op, probe, fresh=False)
    assert [s.fwd_activation_hits for s in idiom.steps] == [0] + [1] * 7
    assert not idiom.passes
    assert "benchmark idiom" in idiom.trace_markdown()

    probe = CacheProbe()
    op = ActivationCachedGemm(probe.watch(kind="activation"))
    fresh = run(op, probe)
    assert [s.activation_hits for s in fresh.steps] == [0] * 8  # no gain in real training
    assert len(set(op.seen_ids)) == 8  # every fresh `a` was alive: no id was reused
    assert fresh.passes and not fresh.has_weight_cache


def tensor_with_id(wanted: int, tries: int) -> torch.Tensor | None:
    for _ in range(tries):
        t = torch.randn(M, K) + 10.0  # different data, same shape
        if id(t) == wanted:
            return t
        del t
    return None


def test_id_reuse_makes_w2_return_stale_results() -> None:
    """Why W2 is rejected statically: an id()-keyed cache hits on a NEW tensor when
    CPython hands it the address of a freed one, and returns the old tensor's result.
    A naive simulation that drops each step's tensors would see these false hits."""
    cache: dict[int, torch.Tensor] = {}
    op = ActivationCachedGemm(cache)
    w = torch.randn(N, K)
    a_old = torch.randn(M, K)
    out_old = op(a_old, w).detach()
    freed_id = id(a_old)
    del a_old
    a_new = tensor_with_id(freed_id, tries=200)
    if a_new is None:
        pytest.skip("CPython did not reuse the freed tensor's address in 200 tries")
    out_new = op(a_new, w)
    assert torch.equal(out_new.detach(), out_old)  # the stale, cached result
    assert not torch.allclose(out_new, reference(a_new, w))


def test_counting_dict_counts_lookups_once() -> None:
    d: CountingDict[str, int] = CountingDict({"a": 1})
    assert "a" in d and "b" not in d  # membership tests are not counted
    assert d["a"] == 1 and d.get("b") is None
    assert d.setdefault("a", 5) == 1 and d.pop("a") == 1 and d.pop("zz", 0) == 0
    assert (d.hits, d.misses) == (3, 2)
    with pytest.raises(KeyError):
        d["missing"]
    assert d.misses == 3


def test_probe_counters_and_kinds() -> None:
    probe = CacheProbe()
    counts = {"w": 0}
    probe.add_counter("weight", lambda: counts["w"])
    counts["w"] = 4
    assert probe.read() == (4, 0) and probe.has_weight_cache
    with pytest.raises(ValueError, match="kind"):
        probe.add_counter("grad", lambda: 0)


def test_op_without_weight_gradient_is_an_error() -> None:
    def detached(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return a @ w.detach().t()

    with pytest.raises(ValueError, match="no gradient"):
        simulate_training_steps(detached, m=4, n=4, k=4, probe=CacheProbe())


def test_default_bf16_run_of_a_plain_op() -> None:
    result = simulate_training_steps(lambda a, w: a @ w.t(), m=4, n=4, k=8, probe=CacheProbe())
    assert result.passes and len(result.steps) == 8
    assert result.trace_markdown(first=2).count("\n| ") == 2
