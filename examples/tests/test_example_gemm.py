from __future__ import annotations

import pytest
import torch
from example_helpers import make_operands, reference

from turbo_kernels.pytorch.ops import gemm


@pytest.mark.parametrize("trans_a", [False, True])
@pytest.mark.parametrize("trans_b", [False, True])
@pytest.mark.parametrize(("m", "n", "k"), [(64, 96, 128), (33, 70, 200)])
def test_gemm_bf16_forward_backward(m: int, n: int, k: int, trans_a: bool, trans_b: bool) -> None:
    a, b = make_operands(m, n, k, trans_a, trans_b)
    out = gemm(a, b, trans_a=trans_a, trans_b=trans_b)
    assert out.shape == (m, n)
    assert out.dtype == torch.bfloat16
    grad_out = torch.randn(m, n, generator=torch.Generator().manual_seed(1)).bfloat16()
    out.backward(grad_out)
    ref, grad_a_ref, grad_b_ref = reference(a, b, trans_a, trans_b, grad_out)
    assert a.grad is not None and b.grad is not None
    assert a.grad.shape == a.shape and b.grad.shape == b.shape
    # Values are O(sqrt(K)): compare relative to that scale, at bf16 tolerance.
    for got, want in ((out, ref), (a.grad, grad_a_ref), (b.grad, grad_b_ref)):
        scale = want.abs().max()
        torch.testing.assert_close(got.float() / scale, want / scale, rtol=1e-2, atol=1e-2)


def test_gemm_out_dtype_and_shape_errors() -> None:
    a, b = make_operands(8, 16, 32, False, True)
    assert gemm(a, b, trans_b=True, out_dtype=torch.float32).dtype == torch.float32
    with pytest.raises(ValueError, match="K mismatch"):
        gemm(a, b)
