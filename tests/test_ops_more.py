"""The grouped GEMM, quantize and attention op adapters on tiny CPU shapes: the bundled
example passes their checks, planted bugs fail them; FLOPs, rows and scores."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from runner.core.csv_io import read_csv, write_csv
from runner.core.csv_schema import ATTENTION_SCHEMA, MEMORY_SCHEMA
from runner.core.shapes import Shape, default_shape_set, grouped_shape, shape_set
from runner.judge.scoring import score
from runner.targets.registry import get_target
from runner.worker.bench.rows import attention_row, gemm_row, memory_row
from runner.worker.bench.timing import Timing
from runner.worker.ops.base import load_adapter

API = get_target("example").load_api()


def with_ops(**replace: Any) -> Any:
    """The example API with some ops replaced."""
    names = ("grouped_gemm", "grouped_gemm_fp8", "quantize_fp8", "flash_attn_func")
    ops = SimpleNamespace(**{n: getattr(API.ops, n) for n in names})
    for name, fn in replace.items():
        setattr(ops, name, fn)
    return SimpleNamespace(
        ops=ops,
        Format=API.Format,
        ScalingGranularity=API.ScalingGranularity,
        Float8QuantConfig=API.Float8QuantConfig,
    )


CASES = [
    ("grouped_gemm", "moe-tiny", None),
    ("grouped_gemm_fp8", "moe-tiny", "blockwise"),
    ("grouped_gemm_fp8", "moe-tiny", "tensorwise"),
    ("quantize", "quant-tiny", "blockwise"),
    ("quantize", "quant-tiny", "rowwise"),
    ("quantize", "quant-tiny", "tensorwise"),
    ("attention", "attn-tiny", None),
]


@pytest.mark.parametrize(("op", "sset", "gran"), CASES)
def test_example_passes_every_check(op: str, sset: str, gran: str | None) -> None:
    adapter = load_adapter(op, API, {"granularity": gran})
    for shape in shape_set(sset):
        result = adapter.check(shape, "cpu", 0)
        assert result.ok, (shape.label, result.problems)


# ---------------------------------------------------------------- planted bugs


def uniform_only_grouped_gemm(a, b, group_lens, trans_b=False, **kw):  # type: ignore[no-untyped-def]
    """Assumes every expert got M / G rows (a layout constant): wrong on skewed sizes."""
    per = a.shape[0] // b.shape[0]
    outs = [a[g * per : (g + 1) * per] @ b[g].t() for g in range(b.shape[0])]
    return torch.cat(outs)


def test_uniform_assumption_fails_on_skewed_groups() -> None:
    adapter = load_adapter("grouped_gemm", with_ops(grouped_gemm=uniform_only_grouped_gemm), {})
    by_dist = {s.params["distribution"]: s for s in shape_set("moe-tiny")}
    assert adapter.check(by_dist["uniform"], "cpu", 0).ok
    for dist in ("topk2_cf1.0", "topk1_cf1.25", "degenerate"):
        assert not adapter.check(by_dist[dist], "cpu", 0).ok, dist


def truncating_quantize(x, out_dtype, granularity, block_size=None, weight=False, *, axis=None):  # type: ignore[no-untyped-def]
    """Rounds toward zero instead of to nearest: many codes one ULP off."""
    codes, scale = API.ops.quantize_fp8(x, out_dtype, granularity, block_size, axis=axis)
    down = codes.float().abs() > (x.float() / _expand(scale, x)).abs()
    bits = codes.view(torch.uint8).clone()
    bits[down & ((bits & 0x7F) > 0)] -= 1
    return bits.view(out_dtype), scale


def _expand(scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    if scale.dim() == 2:
        return scale.repeat_interleave(128, dim=1)[:, : x.shape[1]]
    return scale.reshape(-1, 1) if scale.numel() > 1 else scale


def doubled_scale_quantize(x, out_dtype, granularity, block_size=None, weight=False, *, axis=None):  # type: ignore[no-untyped-def]
    codes, scale = API.ops.quantize_fp8(x, out_dtype, granularity, block_size, axis=axis)
    return codes, scale * 2


@pytest.mark.parametrize("bug", [truncating_quantize, doubled_scale_quantize])
def test_quantize_bugs_fail(bug: Any) -> None:
    adapter = load_adapter("quantize", with_ops(quantize_fp8=bug), {"granularity": "blockwise"})
    result = adapter.check(shape_set("quant-tiny")[2], "cpu", 0)
    assert not result.ok


def leaky_causal_attention(q, k, v, causal=False, **kw):  # type: ignore[no-untyped-def]
    """Causal mask shifted by one: each query also sees the next key."""
    from turbo_kernels.cpu.attention import attention_torch

    if not causal:
        return attention_torch(q, k, v, False, q.shape[-1] ** -0.5)
    pad = torch.zeros_like(k[:, :1])
    k2, v2 = torch.cat([k[:, 1:], pad], 1), torch.cat([v[:, 1:], pad], 1)
    return attention_torch(q, k, v, False, q.shape[-1] ** -0.5) * 0 + attention_torch(
        q, k2, v2, True, q.shape[-1] ** -0.5
    )


def test_attention_mask_bug_fails() -> None:
    adapter = load_adapter("attention", with_ops(flash_attn_func=leaky_causal_attention), {})
    causal = next(s for s in shape_set("attn-tiny") if s.params["causal"])
    full = next(s for s in shape_set("attn-tiny") if not s.params["causal"])
    assert adapter.check(full, "cpu", 0).ok
    assert not adapter.check(causal, "cpu", 0).ok


# ---------------------------------------------------------------- FLOPs, rows, scores


def timing(ms: float) -> Timing:
    return Timing(samples_ms=[ms * 0.99, ms, ms * 1.01], method="perf_counter", stop_reason="fixed")


def test_grouped_flops_come_from_real_group_sizes() -> None:
    shape = grouped_shape("x", 8, 512, 256, 128, "topk2_cf1.0")
    sizes = shape.group_sizes
    assert sizes is not None and sum(sizes) == shape.m < 512
    assert shape.flops_fwd == sum(2 * g * 256 * 128 for g in sizes)
    row = gemm_row(shape, timing(1.0), timing(2.0), {}, {"out_snr": 40.0}, True)
    assert row["B"] == 8 and row["M"] * 8 == shape.m  # type: ignore[operator]
    assert row["Forward TFLOPS"] == pytest.approx(shape.flops_fwd / 1e-3 / 1e12)
    # the Combined Step formula 6*B*M*N*K is exactly 3x the real forward FLOPs
    assert 6 * row["B"] * row["M"] * 256 * 128 == 3 * shape.flops_fwd  # type: ignore[operator]


def test_attention_row_and_score(tmp_path: Path) -> None:
    shape = shape_set("attn-tiny")[0]
    assert shape.params["causal"]
    fwd_flops = 4 * shape.b * shape.params["heads"] * shape.m * shape.n * shape.k / 2
    assert shape.flops_fwd == fwd_flops
    row = attention_row(
        shape,
        timing(1.0),
        timing(2.0),
        {},
        dict.fromkeys(("out_snr", "dq_snr", "dk_snr", "dv_snr"), 50.0),
        True,
    )
    assert row["Backward TFLOPS"] == pytest.approx(2.5 * fwd_flops / 2e-3 / 1e12)
    write_csv(tmp_path / "a.csv", ATTENTION_SCHEMA, [row])
    sc = score(read_csv(tmp_path / "a.csv"))
    assert sc.shapes[0].value == pytest.approx(3.5 * fwd_flops / 3e-3 / 1e12)


def test_memory_row_counts_bytes(tmp_path: Path) -> None:
    shape = shape_set("quant-tiny")[0]
    moved = {"fwd_bytes": 1e6, "bwd_bytes": 0.0}
    row = memory_row(shape, timing(0.5), None, moved, {"max_abs_err": 0.03}, True)
    assert row["Forward GB/s"] == pytest.approx(1e6 / 0.5e-3 / 1e9)
    assert row["Backward GB/s"] is None and row["Backward Time (ms)"] is None
    write_csv(tmp_path / "q.csv", MEMORY_SCHEMA, [row])
    assert score(read_csv(tmp_path / "q.csv")).aggregate == pytest.approx(2.0)


def test_quantize_case_counts_bytes() -> None:
    adapter = load_adapter("quantize", API, {"granularity": "blockwise"})
    shape = Shape("q", 16, 256, 1, params={"op": "quantize"})
    case = adapter.case(shape, "cpu", 0)
    assert case.backward is None
    assert case.fwd_bytes == 16 * 256 * 2 + 16 * 256 + 16 * 2 * 4


@pytest.mark.parametrize(
    ("op", "gpu", "expected"),
    [
        ("grouped_gemm_fp8", "cpu", "moe-cpu"),
        ("grouped_gemm", "gfx942", "moe"),
        ("quantize", "cpu", "quant-cpu"),
        ("attention", "gfx950", "attn"),
        ("gemm_fp8", "cpu", "cpu"),
        ("gemm", "gfx942", "models"),
    ],
)
def test_default_shape_set(op: str, gpu: str, expected: str) -> None:
    assert default_shape_set(op, gpu) == expected


def test_shape_sets_cover_every_distribution() -> None:
    for name in ("moe", "moe-cpu", "moe-tiny"):
        dists = [s.params["distribution"] for s in shape_set(name)]
        assert min(dists.count(d) for d in set(dists)) >= 2 and len(set(dists)) == 4
