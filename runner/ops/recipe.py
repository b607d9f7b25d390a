"""The recipe guard (issue 46 item 5): an FP8 GEMM computes the scaling recipe it was
asked for, not a coarser one that happens to reach the SNR floor.

An SNR against the float32 product on Gaussian inputs does not tell the recipes apart:
one scale per tensor, filled into a blockwise-shaped scale tensor, read 28.6 dB where
the 128-wide blocks read 28.7.  ``emulate_fp8_gemm`` quantises both operands with the
requested granularity's scaling groups (as Primus-Turbo's training call does, checked
at a6a16cdc: TENSORWISE one scale per operand; ROWWISE one per row of a and of b;
BLOCKWISE 1 x bs blocks along K for the activation a and bs x bs blocks for the weight
b; ``scale_inv = amax / fp8_max``, round to nearest even, saturated) and multiplies the
dequantised operands in float32.  An honest kernel differs from it only by its
accumulation order and the output's rounding (above 50 dB); a coarser recipe, on
``outlier_operands`` (rows and blocks of very different magnitudes), by the
quantisation noise of the groups it merged (below 30 dB).  ``recipe_problems`` judges
with ``RECIPE_SNR``.  MX_BLOCKWISE is not emulated (its scale layout differs between
libraries): its GEMMs keep the SNR check alone.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from runner.ops.base import seeded
from runner.ops.quantize import fp8_dtype
from runner.ops.sliced_check import compare

RECIPE_SNR = 40.0  # dB between the kernel's output and the recipe's emulation
EMULATED = ("TENSORWISE", "ROWWISE", "BLOCKWISE")


def fake_quantize(x: torch.Tensor, dtype: torch.dtype, rows: int, cols: int) -> torch.Tensor:
    """``x`` (R, C) quantised to ``dtype`` with one scale per ``rows`` x ``cols`` group
    (edge groups ragged) and dequantised again, in float32."""
    r, c = x.shape
    rb, cb = -(-r // rows), -(-c // cols)
    xf = F.pad(x.float(), (0, cb * cols - c, 0, rb * rows - r)).reshape(rb, rows, cb, cols)
    fp8_max = torch.full((), torch.finfo(dtype).max, dtype=torch.float32, device=x.device)
    scale_inv = xf.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-12) / fp8_max
    codes = (xf / scale_inv).clamp(-fp8_max, fp8_max).to(dtype)
    back = codes.float() * scale_inv
    return back.reshape(rb * rows, cb * cols)[:r, :c]


def emulate_fp8_gemm(
    a: torch.Tensor, b: torch.Tensor, granularity: str, fmt: str, block_size: int
) -> torch.Tensor | None:
    """float32 ``q(a) @ q(b)^T`` under the recipe (a (M, K), b (N, K)); None where the
    granularity is not emulated.  ``fmt``: e4m3, e5m2 or hybrid (E4M3 forward)."""
    operands = emulated_operands(a, b, granularity, fmt, block_size)
    return None if operands is None else operands[0] @ operands[1].t()


def emulated_operands(
    a: torch.Tensor, b: torch.Tensor, granularity: str, fmt: str, block_size: int
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """float32 ``q(a)`` and ``q(b)`` under the recipe; None where the granularity is not
    emulated."""
    gran = granularity.upper()
    if gran not in EMULATED:
        return None
    dtype = fp8_dtype("e5m2" if fmt.lower() == "e5m2" else "e4m3", a.device.type)
    (m, k), n = a.shape, b.shape[0]
    groups = {
        "TENSORWISE": ((m, k), (n, k)),
        "ROWWISE": ((1, k), (1, k)),
        "BLOCKWISE": ((1, block_size), (block_size, block_size)),
    }[gran]
    qa = fake_quantize(a.detach(), dtype, *groups[0])
    qb = fake_quantize(b.detach(), dtype, *groups[1])
    return qa, qb


def outlier_operands(
    m: int, n: int, k: int, device: str, seed: int, block_size: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 operands a (M, K) and b (N, K) whose rows span 2^-5..2^5 and with a few
    ``block_size``-wide blocks 2^6 larger: one scale per tensor or per row loses the
    small ones, the requested blocks keep them."""
    gen = seeded(device, seed)

    def draw(rows: int, tall: int) -> torch.Tensor:
        x = torch.randn(rows, k, generator=gen, device=device)
        x *= torch.exp2(torch.randint(-5, 6, (rows, 1), generator=gen, device=device).float())
        row_blocks, col_blocks = -(-rows // tall), -(-k // block_size)
        # an eighth of the blocks 2^6 larger, drawn at once on the device (a loop of
        # host syncs, one per block, cost seconds a check on a 4096-row GPU shape)
        count = max(1, row_blocks * col_blocks // 8)
        picked = torch.randint(0, row_blocks * col_blocks, (count,), generator=gen, device=device)
        grid = torch.ones(row_blocks * col_blocks, device=device)
        grid[picked] = 64.0
        scale = grid.reshape(row_blocks, col_blocks).repeat_interleave(tall, dim=0)[:rows]
        x *= scale.repeat_interleave(block_size, dim=1)[:, :k]
        return x.to(torch.bfloat16)

    return draw(m, 1), draw(n, block_size)


def recipe_problems(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, granularity: str, fmt: str, bs: int
) -> tuple[float, list[str]]:
    """(SNR of ``out`` against the recipe's emulation, the problem if below RECIPE_SNR);
    (inf, []) where the granularity is not emulated."""
    operands = emulated_operands(a, b, granularity, fmt, bs)
    if operands is None:
        return float("inf"), []
    if tuple(out.shape) != (a.shape[0], b.shape[0]):
        return float("-inf"), [f"recipe guard: out has shape {tuple(out.shape)}"]
    (got,) = compare([out], *operands)  # the product tile by tile, never whole
    snr = got.snr_db()
    if snr >= RECIPE_SNR:
        return snr, []
    what = f"{granularity.upper()}" + (
        f" (block {bs})" if granularity.upper() == "BLOCKWISE" else ""
    )
    return snr, [
        f"recipe guard: out is {snr:.1f} dB from the {what} FP8 emulation on inputs with "
        f"outlier rows and blocks (needs {RECIPE_SNR:.0f} dB): the kernel does not apply "
        "the requested scaling granularity (a coarser recipe)"
    ]
