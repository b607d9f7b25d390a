"""The recipe guard (docs/reliability.md §8): an FP8 GEMM computes the scaling recipe it was
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
with ``RECIPE_SNR``.

MX_BLOCKWISE (MXFP8) is 1 x 32 blocks along K for both operands with power-of-two (E8M0)
scales (Primus-Turbo at a6a16cdc: ``MXFP8_BLOCK_SIZE = 32`` and ``ScaleDtype.E8M0``
asserted by ``Float8QuantConfig`` in ``primus_turbo/pytorch/core/low_precision.py``;
the exponent in ``compute_tile_scale`` of
``csrc/kernels/quantization/quantization_mxfp8.cu``: amax rounded to the format's
mantissa bits, its exponent less the format's largest power of two, 8 for E4M3 and 15
for E5M2, clamped to E8M0's range, values saturated).  A power-of-two scale leaves every
value's mantissa alone, so outlier rows and blocks do not tell a coarser power-of-two
recipe apart (it read above 90 dB); ``mx_operands`` do: each 32-wide K block of a is
2^u larger and of b 2^u smaller (u drawn in -10..10), so every block adds as much to
the output and a scale shared by several blocks flushes the small ones (1 x 64 read
17 dB, 1 x 128 and 128 x 128 weight blocks 10 dB, one per row or tensor 5 dB).  The
example package rounds its scale up instead (``ceil(log2(amax / fp8_max))``, as
NVIDIA's recipe: nothing saturates); the two rules read 38-41 dB apart, so an MX output
is judged against the nearer of the two (``MX_RULES``).  The grouped FP8 GEMM is
judged group by group (``grouped_recipe_problems``): ROWWISE, BLOCKWISE and
MX_BLOCKWISE scale each row of a and each expert's weight on its own whatever the
groups; TENSORWISE, the coarsest recipe, is not judged there (a library may share one
scale across the groups).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from runner.worker.ops.base import seeded
from runner.worker.ops.quantize import fp8_dtype
from runner.worker.ops.sliced_check import compare

RECIPE_SNR = 40.0  # dB between the kernel's output and the recipe's emulation
EMULATED = ("TENSORWISE", "ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")
MX_BLOCK = 32  # MXFP8_BLOCK_SIZE upstream (a6a16cdc)
MX_RULES = ("upstream", "ceil")  # the power-of-two rules an MX output may follow
MX_SPAN = 10  # mx_operands: K blocks 2^-10..2^10


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


def mx_quantize(x: torch.Tensor, dtype: torch.dtype, rule: str) -> torch.Tensor:
    """``x`` (R, C) quantised to ``dtype`` in 1 x ``MX_BLOCK`` blocks with power-of-two
    scales and dequantised, in float32.  ``rule`` "upstream": the scale's exponent is
    amax's (rounded to ``dtype``'s mantissa bits) less ``dtype``'s largest power of two,
    clamped to E8M0's -127..128, values saturated; "ceil": the power of two rounded up
    from amax / fp8_max."""
    r, c = x.shape
    cb = -(-c // MX_BLOCK)
    xf = F.pad(x.float(), (0, cb * MX_BLOCK - c)).reshape(r, cb, MX_BLOCK)
    fp8_max = torch.finfo(dtype).max
    amax = xf.abs().amax(dim=2, keepdim=True).clamp(min=2.0**-126)
    if rule == "ceil":
        scale = torch.exp2(torch.ceil(torch.log2(amax / fp8_max)))
    else:
        mbits = 2 if "e5m2" in str(dtype) else 3
        bits = amax.view(torch.int32) + (1 << (23 - mbits - 1))
        exp = ((bits >> 23) & 0x1FF) - 127 - math.floor(math.log2(fp8_max))
        scale = torch.exp2(exp.clamp(-127, 128).float())
    codes = (xf / scale).clamp(-fp8_max, fp8_max).to(dtype)
    return (codes.float() * scale).reshape(r, cb * MX_BLOCK)[:, :c]


def emulate_fp8_gemm(
    a: torch.Tensor,
    b: torch.Tensor,
    granularity: str,
    fmt: str,
    block_size: int,
    rule: str = MX_RULES[0],
) -> torch.Tensor | None:
    """float32 ``q(a) @ q(b)^T`` under the recipe (a (M, K), b (N, K)); None where the
    granularity is not emulated.  ``fmt``: e4m3, e5m2 or hybrid (E4M3 forward);
    ``rule``: MX_BLOCKWISE's power-of-two rule (``mx_quantize``)."""
    operands = emulated_operands(a, b, granularity, fmt, block_size, rule)
    return None if operands is None else operands[0] @ operands[1].t()


def emulated_operands(
    a: torch.Tensor,
    b: torch.Tensor,
    granularity: str,
    fmt: str,
    block_size: int,
    rule: str = MX_RULES[0],
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """float32 ``q(a)`` and ``q(b)`` under the recipe; None where the granularity is not
    emulated."""
    gran = granularity.upper()
    if gran not in EMULATED:
        return None
    dtype = fp8_dtype("e5m2" if fmt.lower() == "e5m2" else "e4m3", a.device.type)
    if gran == "MX_BLOCKWISE":
        return mx_quantize(a.detach(), dtype, rule), mx_quantize(b.detach(), dtype, rule)
    (m, k), n = a.shape, b.shape[0]
    groups = {
        "TENSORWISE": ((m, k), (n, k)),
        "ROWWISE": ((1, k), (1, k)),
        "BLOCKWISE": ((1, block_size), (block_size, block_size)),
    }[gran]
    return (
        fake_quantize(a.detach(), dtype, *groups[0]),
        fake_quantize(b.detach(), dtype, *groups[1]),
    )


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


def mx_operands(
    m: int, n: int, k: int, device: str, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """bf16 operands a (M, K) and b (N, K) whose ``MX_BLOCK``-wide K blocks are 2^u
    larger in a and 2^u smaller in b (u in -MX_SPAN..MX_SPAN, one per block), rows of a
    2^-3..2^3: every block adds as much to the output, and only a scale per block keeps
    the small ones."""
    gen = seeded(device, seed)
    blocks = -(-k // MX_BLOCK)
    u = torch.randint(-MX_SPAN, MX_SPAN + 1, (blocks,), generator=gen, device=device)
    col = torch.exp2(u.float()).repeat_interleave(MX_BLOCK)[:k]
    rows = torch.exp2(torch.randint(-3, 4, (m, 1), generator=gen, device=device).float())
    a = torch.randn(m, k, generator=gen, device=device) * rows * col
    b = torch.randn(n, k, generator=gen, device=device) / col
    return a.to(torch.bfloat16), b.to(torch.bfloat16)


def recipe_operands(
    granularity: str, m: int, n: int, k: int, device: str, seed: int, bs: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """The inputs on which ``granularity``'s emulation tells a coarser recipe apart."""
    if granularity.upper() == "MX_BLOCKWISE":
        return mx_operands(m, n, k, device, seed)
    return outlier_operands(m, n, k, device, seed, bs)


def recipe_snr(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, granularity: str, fmt: str, bs: int
) -> float | None:
    """The SNR of ``out`` against the recipe's emulation (MX_BLOCKWISE: the nearer of
    ``MX_RULES``); None where the granularity is not emulated, -inf for another shape."""
    rules = MX_RULES if granularity.upper() == "MX_BLOCKWISE" else MX_RULES[:1]
    best = None
    for rule in rules:
        operands = emulated_operands(a, b, granularity, fmt, bs, rule)
        if operands is None:
            return None
        if tuple(out.shape) != (a.shape[0], b.shape[0]):
            return float("-inf")
        (got,) = compare([out], *operands)  # the product tile by tile, never whole
        snr = got.snr_db()
        best = snr if best is None else max(best, snr)
    return best


def recipe_problems(
    out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, granularity: str, fmt: str, bs: int
) -> tuple[float, list[str]]:
    """(SNR of ``out`` against the recipe's emulation, the problem if below RECIPE_SNR);
    (inf, []) where the granularity is not emulated."""
    snr = recipe_snr(out, a, b, granularity, fmt, bs)
    if snr is None:
        return float("inf"), []
    if snr == float("-inf"):
        return snr, [f"recipe guard: out has shape {tuple(out.shape)}"]
    if snr >= RECIPE_SNR:
        return snr, []
    return snr, [_coarser(snr, granularity, bs)]


def guarded_outputs(
    call: Callable[..., torch.Tensor], *operands: torch.Tensor
) -> list[tuple[str, torch.Tensor]]:
    """The op's output on ``operands`` in both autograd modes, each named: under
    ``no_grad`` (an inference or a forward-only timing) and as a training step calls it
    (grad enabled, the floating-point operands leaves that require grad), so a kernel
    that picks a coarser recipe by autograd mode is judged in the mode it cheats in."""
    with torch.no_grad():
        plain = call(*operands)
    leaves = [x.detach().requires_grad_() if x.is_floating_point() else x for x in operands]
    with torch.enable_grad():
        recorded = call(*leaves).detach()
    return [("without autograd", plain), ("with autograd recording", recorded)]


def judged_in_both_modes(
    outputs: list[tuple[str, torch.Tensor]],
    judge: Callable[[torch.Tensor], tuple[float, list[str]]],
) -> tuple[float, list[str]]:
    """``judge`` (an output's recipe SNR and problems) over ``guarded_outputs``: the
    lower SNR, and each mode's problems naming the mode."""
    snrs, problems = [], []
    for mode, out in outputs:
        snr, found = judge(out)
        snrs.append(snr)
        problems += [f"{p} ({mode})" for p in found]
    return min(snrs), problems


def _coarser(snr: float, granularity: str, bs: int) -> str:
    gran = granularity.upper()
    what = gran + {
        "BLOCKWISE": f" (block {bs})",
        "MX_BLOCKWISE": f" (1 x {MX_BLOCK}, power-of-two scales)",
    }.get(gran, "")
    inputs = "K blocks of opposite scales" if gran == "MX_BLOCKWISE" else "outlier rows and blocks"
    return (
        f"recipe guard: out is {snr:.1f} dB from the {what} FP8 emulation on inputs with "
        f"{inputs} (needs {RECIPE_SNR:.0f} dB): the kernel does not apply the requested "
        "scaling granularity (a coarser recipe)"
    )


GROUPED_EMULATED = ("ROWWISE", "BLOCKWISE", "MX_BLOCKWISE")


def grouped_recipe_problems(
    out: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    lens: list[int],
    recipe: tuple[str, str, int],
) -> tuple[float, list[str]]:
    """``recipe_problems`` of a grouped FP8 GEMM (a (T, K) rows by group, b (G, N, K)):
    each group's rows of ``out`` against its own GEMM's emulation, the lowest SNR
    judged; (inf, []) for TENSORWISE (see the module's docstring)."""
    granularity, fmt, bs = recipe
    if granularity.upper() not in GROUPED_EMULATED:
        return float("inf"), []
    worst, problems, start = float("inf"), [], 0
    for e, rows in enumerate(lens):
        if rows:
            sl = slice(start, start + rows)
            snr, found = recipe_problems(out[sl], a[sl], b[e], granularity, fmt, bs)
            if snr < worst:
                worst, problems = snr, found
        start += rows
    return worst, problems
