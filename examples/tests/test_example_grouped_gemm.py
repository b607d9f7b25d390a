"""BF16 grouped GEMM: skewed and empty groups, against a float32 per-group reference;
the Triton kernel (one launch over all groups) on a GPU."""

from __future__ import annotations

import pytest
import torch
from example_helpers import snr_db

from turbo_kernels.pytorch.kernels import set_gemm_backend
from turbo_kernels.pytorch.ops import grouped_gemm

LENS = {
    "uniform": [16, 16, 16, 16],
    "skewed": [40, 3, 0, 21],
    "one-hot": [0, 64, 0, 0],
    "ragged": [1, 7, 33, 23],
}


def reference(a, b, lens, grad_out):  # type: ignore[no-untyped-def]
    a32 = a.detach().float().requires_grad_()
    b32 = b.detach().float().requires_grad_()
    outs, start = [], 0
    for g, rows in enumerate(lens):
        outs.append(a32[start : start + rows] @ b32[g].t())
        start += rows
    out = torch.cat(outs)
    out.backward(grad_out.float())
    return out.detach(), a32.grad, b32.grad


def run_case(lens: list[int], device: str, trans_b: bool = True) -> None:
    gen = torch.Generator().manual_seed(0)
    m, n, k = sum(lens), 96, 128
    a = torch.randn(m, k, generator=gen).to(device, torch.bfloat16).requires_grad_()
    shape = (len(lens), n, k) if trans_b else (len(lens), k, n)
    b = torch.randn(*shape, generator=gen).to(device, torch.bfloat16).requires_grad_()
    group_lens = torch.tensor(lens, dtype=torch.int64, device=device)
    out = grouped_gemm(a, b, group_lens, trans_b=trans_b)
    grad_out = torch.randn(m, n, generator=gen).to(device, torch.bfloat16)
    out.backward(grad_out)
    b_nk = b if trans_b else b.transpose(1, 2)
    ref, ref_da, ref_db = reference(a, b_nk, lens, grad_out)
    assert a.grad is not None and b.grad is not None
    db = b.grad if trans_b else b.grad.transpose(1, 2)
    assert out.shape == (m, n)
    for got, want in ((out, ref), (a.grad, ref_da), (db, ref_db)):
        assert snr_db(got, want) > 40
    for g, rows in enumerate(lens):
        if rows == 0:
            assert torch.count_nonzero(db[g]) == 0


@pytest.mark.parametrize("trans_b", [True, False], ids=["NT", "NN"])
@pytest.mark.parametrize("name", list(LENS))
def test_grouped_gemm_torch(name: str, trans_b: bool) -> None:
    set_gemm_backend("TORCH")
    run_case(LENS[name], "cpu", trans_b)


def test_group_lens_must_match_groups() -> None:
    a, b = torch.randn(8, 16), torch.randn(3, 4, 16)
    with pytest.raises(ValueError, match="does not match 3 groups"):
        grouped_gemm(a, b, torch.tensor([4, 4]), trans_b=True)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(LENS))
def test_grouped_gemm_triton(name: str) -> None:
    pytest.importorskip("triton")
    set_gemm_backend("TRITON")
    run_case(LENS[name], "cuda")
