from __future__ import annotations

import torch


def snr_db(out: torch.Tensor, ref: torch.Tensor) -> float:
    """10 * log10(|ref|^2 / |out - ref|^2), as Primus-Turbo's tests compute it."""
    ref = ref.detach().double()
    noise = (out.detach().double() - ref).pow(2).sum()
    return float(10 * torch.log10(ref.pow(2).sum() / noise))


def make_operands(
    m: int,
    n: int,
    k: int,
    trans_a: bool,
    trans_b: bool,
    device: str = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    seed: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    a = torch.randn((k, m) if trans_a else (m, k), generator=gen).to(device, dtype)
    b = torch.randn((n, k) if trans_b else (k, n), generator=gen).to(device, dtype)
    return a.requires_grad_(), b.requires_grad_()


def reference(
    a: torch.Tensor, b: torch.Tensor, trans_a: bool, trans_b: bool, grad_out: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 forward and autograd grads of op(a) @ op(b)."""
    a32 = a.detach().float().requires_grad_()
    b32 = b.detach().float().requires_grad_()
    out = (a32.t() if trans_a else a32) @ (b32.t() if trans_b else b32)
    out.backward(grad_out.float())
    assert a32.grad is not None and b32.grad is not None
    return out.detach(), a32.grad, b32.grad
