"""docs/reliability.md §8 on a GPU, the replay check: a timed callable captured into a CUDA
graph is timed by replaying the graph, which repeats only the device work recorded at
capture.  Host work done then (a result kept from an earlier call, a CPU computation, a
helper process's device work the call waited for) is replayed as a copy and looks free.
After the timed batches the engine negates the op's named input, replays once, and
requires the named outputs to come back negated (``runner.worker.bench.replay_check``).

On the CPU: every op's flip really negates the outputs it names (the example package's
kernels, FP8 quantisation included), and the check itself on real tensors.  On a GPU
(skipped without one): a GEMM that returns at capture a copy of a result it kept FAILs
its shape, named, and so does one timed with plain launches that returns a result kept by
its input's address; the honest torch GEMM and the example's blockwise FP8 GEMM pass."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from runner.core.shapes import Shape, shape_set
from runner.core.spec import RoundSpec, TimingSettings
from runner.targets.registry import get_target
from runner.worker.bench.integrity import OutputSampler
from runner.worker.bench.replay_check import FrozenReplay, check_replay
from runner.worker.bench.worker_pass import measure_shape, time_case
from runner.worker.ops.base import InputFlip, load_adapter
from runner.worker.ops.gemm import GemmOp

API = get_target("example").load_api()
OPS = [
    ("gemm", "tiny", {}),
    ("gemm_fp8", "tiny", {"granularity": "blockwise"}),
    ("gemm_fp8", "tiny", {"granularity": "tensorwise"}),
    ("grouped_gemm", "moe-tiny", {}),
    ("grouped_gemm_fp8", "moe-tiny", {"granularity": "blockwise"}),
    ("quantize", "quant-tiny", {"granularity": "blockwise"}),
    ("quantize", "quant-tiny", {"granularity": "rowwise"}),
    ("attention", "attn-tiny", {}),
]
needs_gpu = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible to torch")
# The first backward of a process on a GPU runs cuBLAS from autograd's device thread,
# which PyTorch 2.11 warns has no current CUDA context (and then sets it): not ours.
CUBLAS_CONTEXT = "ignore:Attempting to run cuBLAS, but there was no current CUDA context"


def parts(values: Any) -> list[torch.Tensor]:
    items = values if isinstance(values, (tuple, list)) else (values,)
    return [t.detach().float().clone() for t in items]


@pytest.mark.parametrize(("op", "sset", "options"), OPS)
def test_each_ops_flip_negates_the_outputs_it_names(op: str, sset: str, options: dict) -> None:
    adapter = load_adapter(op, API, options)
    case = adapter.case(shape_set(sset)[0], "cpu", 0)
    closures = {"forward": case.forward, "backward": case.backward}
    assert set(case.flips) == {k for k, fn in closures.items() if fn is not None}
    for kind, flip in case.flips.items():
        call = closures[kind]
        assert call is not None
        before = parts(call())
        flip()
        after = parts(call())
        flip()
        again = parts(call())
        for i in flip.negates:
            assert torch.equal(after[i], -before[i]), (op, options, kind, i)
        assert all(torch.equal(x, y) for x, y in zip(again, before, strict=True))


def sampled(frozen: bool) -> tuple[OutputSampler, torch.Tensor, Callable[[], object]]:
    """A timed GEMM through an ``OutputSampler`` and what stands for its graph's replay:
    the call itself (it computes from its input), or, frozen, a copy of the result it
    made first (what a graph replays when the work was done at capture)."""
    a, b = torch.randn(32, 64), torch.randn(48, 64)
    kept = a @ b.t()

    def gemm() -> torch.Tensor:
        return kept.clone() if frozen else a @ b.t()

    sampler = OutputSampler(gemm, flip=InputFlip(a))
    sampler()
    last = sampler.replay_probe.outputs()[0] if sampler.replay_probe else None
    assert last is not None

    def replay() -> None:
        last.copy_(kept if frozen else a @ b.t())

    return sampler, a, replay


def test_a_replay_that_follows_its_negated_input_passes_and_is_left_as_it_was() -> None:
    sampler, a, replay = sampled(frozen=False)
    pristine = a.clone()
    out = sampler.replay_probe.outputs()[0] if sampler.replay_probe else None
    assert out is not None
    expected = out.clone()
    check_replay(sampler.replay_probe, replay, lambda: None)
    assert torch.equal(a, pristine) and torch.equal(out, expected)


def test_a_frozen_replay_fails_named_and_the_input_is_restored() -> None:
    sampler, a, replay = sampled(frozen=True)
    pristine = a.clone()
    with pytest.raises(FrozenReplay, match=r"replay check: output\(s\) \[0\] of the captured"):
        check_replay(sampler.replay_probe, replay, lambda: None)
    assert torch.equal(a, pristine)
    # timed by plain launches there is no graph: the message names the call and how
    with pytest.raises(FrozenReplay, match=r"of the timed call .*\(timed by cuda_events\)"):
        check_replay(sampler.replay_probe, replay, lambda: None, "cuda_events")
    assert torch.equal(a, pristine)


def test_a_large_output_half_frozen_is_seen_through_its_drawn_elements(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An output larger than the sample is compared at positions drawn after the timed
    calls: half its rows kept from an earlier call fail it, the honest one passes."""
    import runner.worker.bench.replay_check as replay_check

    monkeypatch.setattr(replay_check, "SAMPLES", 1000)
    a, b = torch.randn(100, 64), torch.randn(100, 64)
    kept = a @ b.t()
    for half_frozen in (False, True):
        out = kept.clone()

        def call(frozen: bool = half_frozen, out: torch.Tensor = out) -> torch.Tensor:
            out.copy_(a @ b.t())
            if frozen:
                out[50:] = kept[50:]
            return out

        sampler = OutputSampler(call, flip=InputFlip(a))
        sampler()
        if half_frozen:
            with pytest.raises(FrozenReplay):
                check_replay(sampler.replay_probe, sampler, lambda: None)
        else:
            check_replay(sampler.replay_probe, sampler, lambda: None)


def test_the_checks_call_on_a_negated_input_is_never_judged() -> None:
    """Timed with plain launches the check calls the sampler itself; that call's output
    (on the negated input) must not enter the sample judged against the reference."""
    a, b = torch.randn(16, 32), torch.randn(24, 32)
    reference = a @ b.t()
    sampler = OutputSampler(lambda: a @ b.t(), keep=64, flip=InputFlip(a))
    for _ in range(5):
        sampler()
    check_replay(sampler.replay_probe, sampler, lambda: None)
    assert sampler.calls == 6  # five timed calls and the check's call on the restored input

    def verify(kind: str, gots: list[Any]) -> list[list[str]]:
        return [[] if torch.equal(got, reference) else ["differs"] for got in gots]

    assert sampler.problems(verify, "forward") == []


def test_an_op_that_names_no_flip_is_not_checked() -> None:
    sampler = OutputSampler(lambda: torch.ones(3))
    sampler()
    assert sampler.replay_probe is None
    check_replay(None, lambda: None, lambda: None)


# ---------------------------------------------------------------- on a GPU

SHAPE = Shape("gpu-1024x1024x1024", m=1024, n=1024, k=1024)
TIMING = TimingSettings(warmup_s=0.05, repeats=3, max_repeats=5, batch_s=0.02, budget_s=1.0)


def spec(op: str, options: dict[str, Any]) -> RoundSpec:
    return RoundSpec(
        "t46", 1, "candidate", 0, "quick", "example", op, options, (SHAPE,), TIMING, device="cuda"
    )


def kept_at_capture() -> Callable[..., torch.Tensor]:
    """The planted cheat: a real GEMM in eager calls, and under a graph capture a copy
    of the last eager result (right for the fixed inputs, and almost free to replay)."""
    kept: dict[str, torch.Tensor] = {}

    def gemm(a: torch.Tensor, b: torch.Tensor, trans_b: bool = True) -> torch.Tensor:
        if torch.cuda.is_current_stream_capturing() and "out" in kept:
            return kept["out"].clone()
        out = a @ b.t()
        kept["out"] = out.detach()
        return out

    return gemm


@needs_gpu
@pytest.mark.filterwarnings(CUBLAS_CONTEXT)
def test_on_a_gpu_a_result_kept_at_capture_fails_the_shape_named() -> None:
    adapter = GemmOp(SimpleNamespace(ops=SimpleNamespace(gemm=kept_at_capture())), {})
    with pytest.raises(FrozenReplay, match="did not follow its negated input"):
        measure_shape(adapter, SHAPE, spec("gemm", {}), "cuda")


def kept_by_address() -> Callable[..., torch.Tensor]:
    """The planted cheat for plain launches: a host sync keeps the call out of a graph,
    and a result is kept by the input's address and returned again while it holds."""
    kept: dict[int, torch.Tensor] = {}

    def gemm(a: torch.Tensor, b: torch.Tensor, trans_b: bool = True) -> torch.Tensor:
        torch.cuda.synchronize()  # not capturable: timed with plain launches
        if a.data_ptr() not in kept:
            kept[a.data_ptr()] = (a @ b.t()).detach()
        return kept[a.data_ptr()].clone()

    return gemm


@needs_gpu
@pytest.mark.filterwarnings(CUBLAS_CONTEXT)
def test_on_a_gpu_a_result_kept_by_address_fails_under_plain_launches() -> None:
    adapter = GemmOp(SimpleNamespace(ops=SimpleNamespace(gemm=kept_by_address())), {})
    case = adapter.case(SHAPE, "cuda", 0)
    with pytest.raises(FrozenReplay, match="did not follow its negated input"):
        time_case(case, spec("gemm", {}), "cuda")


@needs_gpu
@pytest.mark.filterwarnings(CUBLAS_CONTEXT)
def test_on_a_gpu_an_honest_gemm_is_replayed_and_passes() -> None:
    honest = SimpleNamespace(gemm=lambda a, b, trans_b=True: a @ b.t())
    adapter = GemmOp(SimpleNamespace(ops=honest), {})
    case = adapter.case(SHAPE, "cuda", 0)
    fwd, bwd, problems = time_case(case, spec("gemm", {}), "cuda")
    assert fwd.method == "graph_replay" and problems == []  # the check ran, and passed
    assert bwd is not None  # the backward too, replayed or with plain launches


@needs_gpu
@pytest.mark.filterwarnings(CUBLAS_CONTEXT)
def test_on_a_gpu_the_examples_blockwise_fp8_gemm_passes() -> None:
    options = {"granularity": "blockwise"}
    adapter = load_adapter("gemm_fp8", API, options)
    row = measure_shape(adapter, SHAPE, spec("gemm_fp8", options), "cuda")
    assert row, "no row"
