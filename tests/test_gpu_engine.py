"""measure_gpu on a real GPU (CUDA or ROCm); skipped where torch sees none."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible to torch"),
]

FAST = dict(warmup_s=0.1, batch_s=0.01, budget_s=1.0)


def _settings(**kw: object):
    from runner.core.spec import TimingSettings

    return TimingSettings(**{**FAST, **kw})  # type: ignore[arg-type]


def _gemm(n: int = 2048):
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return lambda: torch.matmul(a, b)


def test_hot_gemm_uses_graph_and_is_sane() -> None:
    from runner.worker.bench.gpu import measure_gpu

    t = measure_gpu(_gemm(), _settings(), "cuda")
    assert t.method == "graph_replay"
    assert t.stop_reason in ("converged", "budget", "max_repeats")
    assert len(t.samples_ms) >= 3
    tflops = 2 * 2048**3 / (t.median_ms * 1e-3) / 1e12
    assert 1.0 < tflops < 2600.0  # above every table peak would be a timing bug
    assert t.extra["warmup"]["seconds"] >= 0.1
    assert "clocks_before" in t.extra and "clocks_after" in t.extra


def test_measure_dispatches_to_gpu() -> None:
    from runner.worker.bench.timing import measure

    assert measure(_gemm(256), _settings(), "cuda").method in ("graph_replay", "cuda_events")


def test_graphs_off_times_plain_launches_and_says_why() -> None:
    """A session that fell back after a crashed replay (``TimingSettings.graphs``)."""
    from runner.worker.bench.gpu import NO_GRAPHS, measure_gpu

    t = measure_gpu(_gemm(), _settings(graphs=False), "cuda")
    assert t.method == "cuda_events" and t.extra.get("graph_error") == NO_GRAPHS
    assert t.median_ms > 0


def test_uncapturable_falls_back_to_events() -> None:
    from runner.worker.bench.gpu import measure_gpu

    x = torch.randn(1 << 20, device="cuda")

    def host_sync() -> float:
        return float(x.sum().item())  # .item() cannot be captured

    t = measure_gpu(host_sync, _settings(), "cuda")
    assert t.method == "cuda_events"
    assert t.extra.get("graph_error")
    assert t.median_ms > 0


def _held_after_churn(nbytes: int) -> int:
    """Bytes the caching allocator keeps after a tensor of ``nbytes`` is made, dropped
    and the cache emptied: about 0 while ``empty_cache`` works."""
    x = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return int(torch.cuda.memory_reserved())


def test_failed_capture_leaves_empty_cache_working() -> None:
    """A capture invalidated inside ``torch.cuda.graph`` left the allocator allocating to
    the graph's pool and ``empty_cache`` freeing nothing (a serving worker kept 23 GiB
    of which 0.5 GiB were live); ``_capture`` releases it."""
    from runner.worker.bench.gpu import _capture

    x = torch.randn(1 << 20, device="cuda")

    def host_sync() -> float:
        return float(x.sum().item())  # invalidates the capture

    base = _held_after_churn(1 << 20)
    graph, why = _capture(host_sync, 4, torch)
    assert graph is None and why
    assert _held_after_churn(1 << 30) - base < (1 << 28)


def test_failed_capture_is_not_tried_again_for_the_same_callable() -> None:
    from runner.worker.bench.gpu import _UNCAPTURABLE, measure_gpu
    from runner.worker.bench.integrity import OutputSampler

    x = torch.randn(1 << 20, device="cuda")

    def host_sync() -> float:
        return float(x.sum().item())

    first = measure_gpu(OutputSampler(host_sync), _settings(), "cuda")
    assert host_sync in _UNCAPTURABLE  # remembered by the wrapped callable
    second = measure_gpu(OutputSampler(host_sync), _settings(), "cuda")
    assert first.method == second.method == "cuda_events"
    assert second.extra["graph_error"] == first.extra["graph_error"]


# On one H100 at 5b6721b the callable ran on a side stream after the learned failure:
# a capture that raises inside torch.cuda.graph leaves its capture stream current
# (docs/benchmarks.md, "5b6721b on one H100").  Strict: it must start passing with the
# stream restored (branch capture-stream-restore, measured on a GPU before it lands).
@pytest.mark.xfail(strict=True, reason="a failed capture leaves its capture stream current")
def test_a_capture_failure_learned_before_the_turns_serves_every_pool_member(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A serving worker tries one pool member's capture while it prepares; the timed
    measurements of every member of that shape and kind then go straight to plain
    launches: no capture on a side stream, no side-stream check."""
    from runner.worker.bench import gpu
    from runner.worker.bench.integrity import OutputSampler

    def member() -> tuple[object, list[bool]]:
        x = torch.randn(1 << 20, device="cuda")
        seen: list[bool] = []

        def host_sync() -> float:
            seen.append(torch.cuda.current_stream() != torch.cuda.default_stream())
            return float(x.sum().item())  # .item() cannot be captured

        return host_sync, seen

    slot = gpu.CaptureSlot("one shape's backward")
    first, _ = member()
    learned = gpu.learn_capture(first, slot)
    assert learned and slot in gpu._UNCAPTURABLE
    checks: list[object] = []
    real_check = gpu._leaves_work_behind

    def counted(fn: object, region: object) -> bool:
        checks.append(fn)
        return real_check(fn, region)  # type: ignore[arg-type]

    monkeypatch.setattr(gpu, "_leaves_work_behind", counted)
    other, seen = member()
    t = gpu.measure_gpu(OutputSampler(other, slot=slot), _settings(), "cuda")
    assert t.method == "cuda_events" and t.extra["graph_error"] == learned
    assert checks == [] and seen and not any(seen)  # never on the capture's side stream
    fresh, _ = member()
    gpu.measure_gpu(OutputSampler(fresh), _settings(), "cuda")  # no slot: checked as before
    assert len(checks) == 1


def test_a_capturable_member_learns_nothing() -> None:
    from runner.worker.bench import gpu
    from runner.worker.bench.integrity import OutputSampler

    slot = gpu.CaptureSlot("one shape's forward")
    assert gpu.learn_capture(_gemm(256), slot) == ""
    assert slot not in gpu._UNCAPTURABLE
    t = gpu.measure_gpu(OutputSampler(_gemm(256), slot=slot), _settings(), "cuda")
    assert t.method == "graph_replay"


def test_the_real_training_step_is_timed_with_plain_launches() -> None:
    """A step that draws new values on new buffers every call is never captured."""
    from runner.worker.bench.gpu import measure_gpu
    from runner.worker.bench.worker_pass import unreplayed
    from runner.worker.ops.base import FreshStep

    gen = torch.Generator(device="cuda").manual_seed(1)
    draws: list[int] = []

    def draw() -> list[torch.Tensor]:
        made = [torch.randn(512, 512, device="cuda", generator=gen)]
        draws.append(made[0].data_ptr())
        return made

    def step() -> torch.Tensor:
        (x,) = draw()
        return x @ x

    fresh = FreshStep(step, draw)
    unreplayed(fresh)
    t = measure_gpu(fresh.step, _settings(), "cuda")
    assert t.method == "cuda_events" and "plain launches" in t.extra["graph_error"]
    assert len(draws) > 3


def test_cold_mode_is_slower_or_equal_for_cache_resident_work() -> None:
    from runner.worker.bench.gpu import measure_gpu

    x = torch.randn(4 << 20, device="cuda")  # 16 MiB, fits in L2/LLC
    y = torch.empty_like(x)
    hot = measure_gpu(lambda: y.copy_(x), _settings(), "cuda")
    cold = measure_gpu(lambda: y.copy_(x), _settings(cache_mode="cold"), "cuda")
    assert cold.method == "cuda_events" and cold.iters_per_sample == 1
    assert cold.extra["flush_bytes"] >= 256 << 20
    assert cold.median_ms >= 0.9 * hot.median_ms


def test_side_stream_work_is_timed() -> None:
    """Work launched on another stream and never joined must not vanish from the time."""
    from runner.worker.bench.gpu import measure_gpu

    side = torch.cuda.Stream()
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    small = torch.randn(16, 16, device="cuda")

    def honest():
        return torch.matmul(a, a)

    def hidden():
        with torch.cuda.stream(side):
            out = torch.matmul(a, a)
        small.add_(1)  # only this trivial kernel is on the timed stream
        return out

    s = _settings()
    t_honest = measure_gpu(honest, s, "cuda").median_ms
    t_hidden = measure_gpu(hidden, s, "cuda").median_ms
    assert t_hidden >= 0.7 * t_honest


def test_bad_cache_mode() -> None:
    from runner.worker.bench.gpu import measure_gpu

    with pytest.raises(ValueError, match="cache_mode"):
        measure_gpu(_gemm(64), _settings(cache_mode="lukewarm"), "cuda")
