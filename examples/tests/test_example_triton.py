"""Triton backend on a GPU: same SNR gates as the CPU tests, plus agreement with TORCH."""

from __future__ import annotations

import pytest
import torch
from example_helpers import make_operands, reference, snr_db

from turbo_kernels.pytorch.core.low_precision import (
    Float8QuantConfig,
    Format,
    ScalingGranularity,
    float8_e4m3,
)
from turbo_kernels.pytorch.kernels import BackendType, PrecisionType, get_gemm_backend
from turbo_kernels.pytorch.kernels import set_gemm_backend as set_backend
from turbo_kernels.pytorch.ops import gemm, gemm_fp8

pytestmark = pytest.mark.gpu

SHAPES = [(256, 512, 1024), (130, 200, 300), (1, 4096, 512)]
IDS = ["x".join(map(str, s)) for s in SHAPES]


def test_default_backend_is_triton_on_gpu() -> None:
    pytest.importorskip("triton")
    assert get_gemm_backend(PrecisionType.FP8) is BackendType.TRITON


@pytest.mark.parametrize("trans_b", [True, False], ids=["NT", "NN"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_triton_gemm_bf16(shape: tuple[int, int, int], trans_b: bool) -> None:
    m, n, k = shape
    set_backend("TRITON")
    a, b = make_operands(m, n, k, False, trans_b, device="cuda")
    out = gemm(a, b, trans_b=trans_b)
    grad_out = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    out.backward(grad_out)
    ref, grad_a_ref, grad_b_ref = reference(a, b, False, trans_b, grad_out)
    assert a.grad is not None and b.grad is not None
    for got, want in ((out, ref), (a.grad, grad_a_ref), (b.grad, grad_b_ref)):
        scale = want.abs().max()
        torch.testing.assert_close(got.float() / scale, want / scale, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("fmt", [Format.E4M3, Format.HYBRID], ids=lambda f: f.name.lower())
@pytest.mark.parametrize("granularity", list(ScalingGranularity), ids=lambda g: g.name.lower())
@pytest.mark.parametrize("trans_b", [True, False], ids=["NT", "NN"])
@pytest.mark.parametrize("shape", SHAPES, ids=IDS)
def test_triton_gemm_fp8(
    shape: tuple[int, int, int], trans_b: bool, granularity: ScalingGranularity, fmt: Format
) -> None:
    m, n, k = shape
    config = Float8QuantConfig(format=fmt, granularity=granularity)
    set_backend("TRITON")
    a, b = make_operands(m, n, k, False, trans_b, device="cuda")
    out = gemm_fp8(a, b, trans_b=trans_b, config=config)
    grad_out = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
    out.backward(grad_out)
    ref, grad_a_ref, grad_b_ref = reference(a, b, False, trans_b, grad_out)
    assert a.grad is not None and b.grad is not None
    grad_min = 25.0 if fmt is Format.E4M3 else 20.0
    assert snr_db(out, ref) >= 25.0
    assert snr_db(a.grad, grad_a_ref) >= grad_min
    assert snr_db(b.grad, grad_b_ref) >= grad_min

    # Same quantised inputs through the TORCH backend: only accumulation order differs.
    set_backend("TORCH")
    with torch.no_grad():
        out_torch = gemm_fp8(a, b, trans_b=trans_b, config=config)
    assert snr_db(out, out_torch.float()) >= 40.0


def test_fp8_dtype_matches_device() -> None:
    dtype = float8_e4m3("cuda")
    arch = getattr(torch.cuda.get_device_properties(0), "gcnArchName", "")
    if torch.version.hip is not None and arch.startswith("gfx942"):
        assert dtype == torch.float8_e4m3fnuz
    else:
        assert dtype == torch.float8_e4m3fn
