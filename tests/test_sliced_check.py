"""docs/protocol.md §5.8, checks in slices: a GEMM's correctness check holds its float32
reference one tile at a time (``runner.worker.ops.sliced_check``), so its peak memory stays
within the shape's figure (``runner.core.op_info``, which counts a tile, not the whole
reference), and a wrong value in any tile still fails the check.  Real checks of a
real GEMM on the CPU; the peak is the process's resident high-water mark (Linux
``VmHWM``, reset through ``/proc/self/clear_refs``) in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
import torch

from runner.core import op_info as info
from runner.core.shapes import Shape
from runner.targets.example import EXAMPLE
from runner.worker.ops.gemm import Fp8GemmOp, GemmOp
from runner.worker.ops.sliced_check import compare, gemm_operands, tile_rows

ROOT = Path(__file__).resolve().parent.parent
BOUND = 4 << 20  # the test's tile bound: the whole float32 output below is 4x it


def plain_gemm(a: torch.Tensor, b: torch.Tensor, trans_b: bool = True) -> torch.Tensor:
    return a @ b.t()


API = types.SimpleNamespace(ops=types.SimpleNamespace(gemm=plain_gemm))

PEAK = textwrap.dedent(
    """
    import json, re, sys, types
    import torch
    from runner.core.shapes import Shape
    from runner.core import op_info as info
    from runner.worker.ops.gemm import GemmOp

    torch.set_num_threads(1)
    info.CHECK_SLICE_BYTES = int(sys.argv[1])
    shape = Shape("big", m=2048, n=2048, k=128)
    api = types.SimpleNamespace(ops=types.SimpleNamespace(gemm=lambda a, b, trans_b: a @ b.t()))
    op = GemmOp(api, {})
    op.check(Shape("warm", m=64, n=64, k=64), "cpu", 1)  # allocator and kernels warm

    def kib(key):
        text = open("/proc/self/status").read()
        return int(re.search(key + r":\\s+(\\d+)", text).group(1))

    open("/proc/self/clear_refs", "w").write("5")  # the high-water mark starts here
    before = kib("VmRSS")
    result = op.check(shape, "cpu", 7)
    peak = (kib("VmHWM") - before) * 1024
    figure = info.shape_memory("gemm", shape).worker(1)
    print(json.dumps({"ok": result.ok, "peak": peak, "figure": figure}))
    """
)


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_large_check_stays_within_the_shapes_figure() -> None:
    """A 2048 x 2048 output's whole float32 reference is 16 MiB (4x the tile bound),
    its gradients' besides; sliced, the check's peak is within the shape's figure,
    which counts one tile (on the CPU, 2026-12-03: 36 MiB against 64).  At 9d73f9a the
    whole reference with its float64 SNR copies took 192 MiB, over that commit's own
    figure (138 MiB)."""
    run = subprocess.run(
        [sys.executable, "-c", PEAK, str(BOUND)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got = json.loads(run.stdout.strip().splitlines()[-1])
    assert got["ok"]
    assert 4 * BOUND <= 2048 * 2048 * 4  # the whole reference would not fit in a tile
    assert 0 < got["peak"] <= got["figure"], got


def test_tiles_respect_the_bound() -> None:
    """Every tile's float32 operand rows and temporaries stay within the bound, for a
    Llama-3.1-70B gate_up mb4 output (32768 x 57344, K 8192) as for a small one."""
    for p, q, r in ((32768, 57344, 8192), (32768, 8192, 57344), (57344, 8192, 32768)):
        tp, tq = tile_rows(p, q, r, info.CHECK_SLICE_BYTES)
        assert 4 * (tp + tq) * r + 24 * tp * tq <= info.CHECK_SLICE_BYTES
        assert tp < p and tq < q  # sliced: never the whole output
    assert tile_rows(4096, 2048, 256, info.CHECK_SLICE_BYTES) == (4096, 2048)  # one tile


@pytest.mark.parametrize("where", ["first", "middle", "last"])
@pytest.mark.parametrize("output", ["out", "da", "db"])
def test_a_wrong_value_in_any_tile_fails(where: str, output: str) -> None:
    """One element off in the first, a middle or the last tile of any output fails
    the check (bf16 tolerance and SNR), and the same outputs unchanged pass; the
    tiles are small here so that each output has many."""
    gen = torch.Generator().manual_seed(3)
    a, b, g = (torch.randn(*d, generator=gen).bfloat16() for d in ((96, 40), (72, 40), (96, 72)))
    ops = gemm_operands(a, b, g)
    ref = {
        "out": a.float() @ b.float().t(),
        "da": g.float() @ b.float(),
        "db": g.float().t() @ a.float(),
    }
    bound = 4 * 8 * 72 + 24 * 64  # a few rows per tile
    good = ref[output].bfloat16()
    bad = good.clone()
    row = {"first": 0, "middle": bad.shape[0] // 2, "last": -1}[where]
    bad[row, -1] += 50.0 * ref[output].abs().max().bfloat16()
    x, y = ops[output]
    assert tile_rows(x.shape[0], y.shape[0], x.shape[1], bound)[0] < x.shape[0]  # tiles
    ok, wrong = compare([good, bad], *ops[output], bound=bound)
    assert ok.allclose() and ok.snr_db() > 40
    assert not wrong.allclose() and wrong.snr_db() < 25


def test_a_wrong_gradient_fails_the_ops_check_and_its_timed_sample() -> None:
    """Through the op adapters: a GEMM whose weight gradient is off in its last rows
    FAILs ``check`` (bf16 and FP8 thresholds alike) and its sampled timed backward;
    the honest GEMM passes both."""

    class Skewed(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):  # type: ignore[no-untyped-def]
            ctx.save_for_backward(a, b)
            return a @ b.t()

        @staticmethod
        def backward(ctx, g):  # type: ignore[no-untyped-def]
            a, b = ctx.saved_tensors
            db = g.t() @ a
            db[-3:] *= 3.0  # the last tile's rows wrong
            return g @ b, db

    shape = Shape("s", m=64, n=48, k=32)
    skewed = types.SimpleNamespace(
        ops=types.SimpleNamespace(gemm=lambda a, b, trans_b: Skewed.apply(a, b))
    )
    honest = GemmOp(API, {}).check(shape, "cpu", 5)
    assert honest.ok, honest.problems
    wrong = GemmOp(skewed, {}).check(shape, "cpu", 5)
    assert not wrong.ok and any(p.startswith("db not allclose") for p in wrong.problems)
    case = GemmOp(skewed, {}).case(shape, "cpu", 5)
    assert case.verify is not None
    (forward_problems,) = case.verify("forward", [case.forward()])
    assert forward_problems == []
    (backward_problems,) = case.verify("backward", [case.backward()])
    assert any(p.startswith("db not allclose") for p in backward_problems)
    api = EXAMPLE.load_api()
    fp8_api = types.SimpleNamespace(
        ops=types.SimpleNamespace(gemm_fp8=lambda a, b, trans_b, config: Skewed.apply(a, b)),
        Format=api.Format,
        ScalingGranularity=api.ScalingGranularity,
        Float8QuantConfig=api.Float8QuantConfig,
        ScaleDtype=api.ScaleDtype,
    )
    fp8 = Fp8GemmOp(fp8_api, {"granularity": "blockwise"}).check(shape, "cpu", 5)
    assert fp8.figures["out_snr"] >= 25.0 and fp8.figures["db_snr"] < 25.0
    assert any(p.startswith("db_snr ") and "below 25 dB" in p for p in fp8.problems)
