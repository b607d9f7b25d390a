"""docs/reliability.md §7 row 15: a candidate keeping activations' FP8 codes on the tensor objects
between calls (``a._fp8_cache``) was rejected only because its gain was noisy; the
state check read the package's globals, not the tensors, so nothing named it.  Now the
fingerprint includes every attribute held on a live tensor
(``runner.worker.bench.statecheck.tensor_attributes``): the training step writes it, the 8-step
simulation finds it written at every step with only the activations fresh, and the
shape FAILs naming it, before any timing decides."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch

from runner.compare.shapes import level_shapes
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.worker.bench.statecheck import stateful_probe

OPS = "turbo_kernels/pytorch/ops/gemm_fp8.py"
FORWARD = "        return _fp8_gemm(a_mk, fwd, b_q, fwd, config, out_dtype)\n"
# The activation's codes kept on the activation, keyed by its version (row 15).
TENSOR_CACHE = """        key = (a._version, fwd, gran, bs, trans_a)
        held = getattr(a, "_fp8_cache", None)
        if held is None or held[0] != key:
            held = (key, quantize_fp8(a_mk, fwd, gran, bs))
            a._fp8_cache = held
        a_fp8, a_scale_inv = held[1]
        return gemm_fp8_impl(a_fp8, a_scale_inv, *b_q, gran, out_dtype, bs)
"""
# The same on the example's base (the demo's speed-up ROLLED BACK, as a loaded machine
# can make it): the weight is quantised in the forward as before.
BASE_FORWARD = "        return _fp8_gemm(a_mk, fwd, b_nk, fwd, config, out_dtype)\n"
BASE_TENSOR_CACHE = """        gran, bs = config.granularity, config.block_size
        key = (a._version, fwd, gran, bs, trans_a)
        held = getattr(a, "_fp8_cache", None)
        if held is None or held[0] != key:
            held = (key, quantize_fp8(a_mk, fwd, gran, bs))
            a._fp8_cache = held
        a_fp8, a_scale_inv = held[1]
        b_q = quantize_fp8(b_nk, fwd, gran, bs, weight=True)
        return gemm_fp8_impl(a_fp8, a_scale_inv, *b_q, gran, out_dtype, bs)
"""


def _probe_op(
    op: Any, monkeypatch: pytest.MonkeyPatch, package: types.ModuleType | None = None
) -> dict[str, Any]:
    """``stateful_probe`` over an adapter whose package (default: one holding no state
    in its modules): a training step (fresh activations, the same weight) detects what
    the op keeps, the 8-step simulation judges it."""
    package = package or types.ModuleType("rt_tensor_pkg")
    monkeypatch.setitem(sys.modules, "rt_tensor_pkg", package)
    w = torch.randn(4, 8)

    def judge(out: torch.Tensor, a: torch.Tensor, w: torch.Tensor) -> bool:
        return bool(torch.allclose(out.float(), a.float() @ w.float().t(), atol=0.5, rtol=0.05))

    class Adapter:
        api = package

        def simulation(self, shape: Any, device: str) -> Any:
            return op, {"m": 4, "n": 4, "k": 8}, judge

    kept: list[torch.Tensor] = []  # as runner.worker.ops.base.fresh_training_step keeps them

    def step() -> None:
        kept.append(torch.randn(4, 8))
        op(kept[-1], w)
        w.add_(0.01)  # the SGD step: a new weight version

    return stateful_probe(Adapter(), None, "cpu", None, step)


def _on_the_activation(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    held = getattr(a, "_fp8_cache", None)
    if held is None or held[0] != a._version:
        held = (a._version, a.detach().clone())
        a._fp8_cache = held
    return held[1] @ w.t() + (a - a.detach()) @ w.t()


def _on_the_weight(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    held = getattr(w, "_t_cache", None)
    if held is None or held[0] != w._version:
        held = (w._version, w.detach().t().contiguous())
        w._t_cache = held
    live = a @ w.t()
    return live - live.detach() + a.detach() @ held[1]


def test_codes_kept_on_the_activation_are_written_every_step(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = _probe_op(_on_the_activation, monkeypatch)
    assert any(w.startswith("<tensor ") and w.endswith("._fp8_cache") for w in state["written"])
    sim = state["simulation"]
    assert (sim["idiom"]["state_written_steps"], sim["idiom"]["served_steps"]) == (1, 7)
    assert sim["activations"]["state_written_steps"] == 8
    assert any("kept state written at step(s) [1, 2, 3, 4, 5, 6, 7]" in p for p in sim["problems"])


def test_codes_kept_on_the_weight_until_it_changes_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    state = _probe_op(_on_the_weight, monkeypatch)
    assert any(w.endswith("._t_cache") for w in state["written"])  # a new weight version
    sim = state["simulation"]
    assert (sim["activations"]["state_written_steps"], sim["activations"]["served_steps"]) == (1, 7)
    assert sim["problems"] == []


def test_a_cached_helper_hit_at_every_call_is_served_not_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Upstream's op reads the device's compute capability through an ``lru_cache`` at
    every call (a hit each time: a6a16cdc, ``_get_device_compute_capability``); on an
    H100 every shape FAILED the simulation as "kept state written at step(s) [1..7]".
    A hit writes nothing; a memo of the activations (a miss every step) still FAILs."""
    import functools

    @functools.lru_cache(maxsize=128)  # as upstream declares it
    def capability() -> tuple[int, int]:
        return (9, 0)

    @functools.lru_cache(maxsize=8)
    def memo(key: bytes, w: torch.Tensor) -> torch.Tensor:
        a = torch.frombuffer(bytearray(key), dtype=torch.float32).reshape(4, 8)
        return a.to(w.dtype) @ w.detach().t()

    def honest(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        capability()
        return a @ w.t()

    def memoised(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        held = memo(a.detach().float().numpy().tobytes(), w)
        return held + (a @ w.t() - (a @ w.t()).detach())

    package = types.ModuleType("rt_tensor_pkg")
    package.capability = capability  # type: ignore[attr-defined]
    package.memo = memo  # type: ignore[attr-defined]
    state = _probe_op(honest, monkeypatch, package)
    assert state["written"] == ["rt_tensor_pkg.capability"]  # the probe counts the hit
    sim = state["simulation"]
    assert sim["activations"]["state_written_steps"] == 0 and sim["problems"] == []
    state = _probe_op(memoised, monkeypatch, package)
    every_step = "kept state written at step(s) [1, 2, 3, 4, 5, 6, 7]"
    assert any(every_step in p for p in state["simulation"]["problems"])


PROBE = """
import json, sys
from runner.worker.bench.statecheck import stateful_probe
from runner.core.shapes import Shape
from runner.worker.ops.base import load_adapter
from runner.targets.registry import get_target

spec = json.loads(sys.argv[1])
target = get_target(spec["target"])
adapter = load_adapter(spec["op"], target.load_api(), spec["options"])
shape = Shape.from_dict(spec["shape"])
step = adapter.fresh_step(shape, "cpu", 0)
state = stateful_probe(adapter, shape, "cpu", None, step.step)
print(json.dumps({"written": state["written"],
                  "problems": (state.get("simulation") or {}).get("problems", [])}))
"""


@pytest.mark.integration
def test_the_demo_candidate_that_keeps_codes_on_the_activation_is_named(
    demo_copy: Path,
) -> None:
    """The state probe of a worker pass, alone (no timing), on the demo's lineage head
    with the row-15 change: the kept attribute is named and the simulation fails it."""
    import runner

    camp = Campaign.load(demo_copy)
    m = camp.manifest
    shape = min(level_shapes(m, "quick"), key=lambda s: s.m * s.n * s.k)
    spec = {
        "target": m.target,
        "op": m.target_op,
        "shape": shape.to_dict(),
        "options": {"granularity": m.granularity, "backend": m.target_backend},
    }
    lineage = Lineage(Path(m.source), camp.name, None)
    runner_root = str(Path(runner.__file__).resolve().parent.parent)
    with lineage.worktree(lineage.head()) as tree:
        text = (tree / OPS).read_text(encoding="utf-8")
        # the head holds the demo's speed-up when its round 3 was ACCEPTED, else the base
        forward, cache = (
            (FORWARD, TENSOR_CACHE) if FORWARD in text else (BASE_FORWARD, BASE_TENSOR_CACHE)
        )
        assert text.count(forward) == 1
        env = {
            **os.environ,
            "PYTHONPATH": f"{tree}{os.pathsep}{runner_root}",
            "TURBO_KERNELS_GEMM_BACKEND": m.target_backend,
        }
        honest = _probe(spec, env, tree)
        (tree / OPS).write_text(text.replace(forward, cache), encoding="utf-8")
        cached = _probe(spec, env, tree)
    assert honest["problems"] == [] and not any("<tensor" in w for w in honest["written"])
    assert any(w.startswith("<tensor ") and w.endswith("._fp8_cache") for w in cached["written"])
    assert any("only the activations fresh" in p for p in cached["problems"]), cached


def _probe(spec: dict[str, Any], env: dict[str, str], tree: Path) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(spec)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    got: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return got
