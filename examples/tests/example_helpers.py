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


def outlier_operands(m: int, n: int, k: int, seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 a (M, K) and b (N, K) with rows spanning 2^-5..2^5 and a few 128-wide blocks
    64 times larger: coarser scaling groups lose the small values."""
    gen = torch.Generator().manual_seed(seed)

    def draw(rows: int, tall: int) -> torch.Tensor:
        x = torch.randn(rows, k, generator=gen)
        x *= torch.exp2(torch.randint(-5, 6, (rows, 1), generator=gen).float())
        row_blocks, col_blocks = -(-rows // tall), -(-k // 128)
        for _ in range(max(1, row_blocks * col_blocks // 8)):
            i = int(torch.randint(0, row_blocks, (1,), generator=gen))
            j = int(torch.randint(0, col_blocks, (1,), generator=gen))
            x[i * tall : (i + 1) * tall, j * 128 : (j + 1) * 128] *= 64.0
        return x.bfloat16()

    return draw(m, 1), draw(n, 128)


def _fake_quant(x: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    """E4M3 quantise-dequantise with one scale (amax / 448) per rows x cols group."""
    r, c = x.shape
    rb, cb = -(-r // rows), -(-c // cols)
    xf = torch.nn.functional.pad(x.float(), (0, cb * cols - c, 0, rb * rows - r))
    xf = xf.reshape(rb, rows, cb, cols)
    scale = xf.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12) / torch.tensor(448.0)
    codes = (xf / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return (codes.float() * scale).reshape(rb * rows, cb * cols)[:r, :c]


def emulated_fp8_gemm(
    a: torch.Tensor, b: torch.Tensor, a_group: tuple[int, int], b_group: tuple[int, int]
) -> torch.Tensor:
    """float32 q(a) @ q(b)^T with the given scaling groups (rows x cols of each operand)."""
    return _fake_quant(a, *a_group) @ _fake_quant(b, *b_group).t()
