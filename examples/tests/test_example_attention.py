"""flash_attn_func: causal and full, GQA, against a float32 reference (forward and
gradients); the Triton forward on a GPU."""

from __future__ import annotations

import pytest
import torch
from example_helpers import snr_db

from turbo_kernels.pytorch.kernels.backend import ATTENTION_BACKEND_ENV
from turbo_kernels.pytorch.ops import flash_attn_func

CASES = [(1, 64, 4, 4, 32), (2, 100, 8, 2, 64), (1, 128, 4, 1, 64)]  # B, S, H, H_kv, D


def reference(q, k, v, causal, grad_out):  # type: ignore[no-untyped-def]
    q32, k32, v32 = (t.detach().float().requires_grad_() for t in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    qh = q32.transpose(1, 2)
    kh = k32.transpose(1, 2).repeat_interleave(rep, 1)
    vh = v32.transpose(1, 2).repeat_interleave(rep, 1)
    s = qh @ kh.transpose(-1, -2) / q.shape[-1] ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(s.shape[-2:], dtype=torch.bool, device=s.device).triu(1),
                          float("-inf"))  # fmt: skip
    out = (s.softmax(-1) @ vh).transpose(1, 2)
    out.backward(grad_out.float())
    return out.detach(), q32.grad, k32.grad, v32.grad


def run_case(case: tuple[int, ...], causal: bool, device: str) -> None:
    b, s, h, hkv, d = case
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, s, n, d, generator=gen).to(device, torch.bfloat16).requires_grad_()
               for n in (h, hkv, hkv))  # fmt: skip
    out = flash_attn_func(q, k, v, causal=causal)
    grad_out = torch.randn(b, s, h, d, generator=gen).to(device, torch.bfloat16)
    out.backward(grad_out)
    ref = reference(q, k, v, causal, grad_out)
    for got, want in zip((out, q.grad, k.grad, v.grad), ref, strict=True):
        assert got is not None and got.shape == want.shape
        assert snr_db(got, want) > 40


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_attention_torch(case: tuple[int, ...], causal: bool) -> None:
    run_case(case, causal, "cpu")


def test_unsupported_arguments_raise() -> None:
    q = torch.randn(1, 4, 2, 16)
    with pytest.raises(NotImplementedError, match="dropout_p"):
        flash_attn_func(q, q, q, dropout_p=0.1)


@pytest.mark.gpu
@pytest.mark.parametrize("causal", [True, False], ids=["causal", "full"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_attention_triton(
    case: tuple[int, ...], causal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("triton")
    monkeypatch.setenv(ATTENTION_BACKEND_ENV, "TRITON")
    run_case(case, causal, "cuda")
