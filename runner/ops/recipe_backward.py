"""The recipe guard where training runs the op: with autograd recording, on the
backward's two GEMMs too, and over a sweep of input magnitudes.

A recipe guard that calls the op under ``no_grad`` on leaves that need no gradient sees
only what inference runs: an op that picks a coarser recipe whenever autograd records
(one scale per tensor for BLOCKWISE: 26 dB from the blockwise emulation, where the floor
is 40) passed it, and so did a backward that drops the recipe altogether (one scale for
``grad_out``, dgrad and wgrad as bf16 GEMMs: a token row of small gradients read 0 dB)
while the forward stayed honest.  ``guarded_call`` runs the op as a training step does
(grad enabled, ``requires_grad`` inputs, a backward on ``grad_out``);
``backward_recipe_problems`` judges dgrad and wgrad against the emulation of the
blockwise backward recipe on outlier gradients; ``MAGNITUDES`` scales every input
(x1e-3 and x64, as KernelBench-Hard's numeric stress) so a scale that does not follow
the data shows.

The blockwise backward recipe, as Primus-Turbo's ``FP8GemmBlockFunction`` (checked at
a6a16cdc, ``primus_turbo/pytorch/ops/gemm_fp8.py``): ``grad_out`` in the backward format
(E5M2 for E5M2 and HYBRID, else E4M3) with 1 x bs blocks along each GEMM's reduction dim
(rows of grad_out for dgrad, its columns for wgrad); the weight's bs x bs blocks of the
forward, reused for dgrad; the activation in 1 x bs blocks along M for wgrad.  The
example package quantises the activation for wgrad in bs x bs blocks instead, so wgrad
is judged against the nearer of the two (``WGRAD_RULES``, as MX_BLOCKWISE's two
power-of-two rules are).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from runner.ops.quantize import fp8_dtype
from runner.ops.recipe import RECIPE_SNR, fake_quantize, outlier_operands
from runner.ops.sliced_check import compare

BACKWARD_EMULATED = ("BLOCKWISE",)
MAGNITUDES = (1.0, 1e-3, 64.0)  # every input scaled: the recipe guard's sweep
WGRAD_RULES = ("upstream", "square")  # the activation's blocks for wgrad: 1 x bs, bs x bs

Operands = tuple[torch.Tensor, torch.Tensor]


def outlier_gradient(m: int, n: int, device: str, seed: int, bs: int) -> torch.Tensor:
    """A bf16 ``grad_out`` (M, N) whose token rows span 2^-5..2^5 with some 1 x bs blocks
    along N 2^6 larger: one scale for the whole tensor flushes the small rows."""
    return outlier_operands(m, 1, n, device, seed, bs)[0]


def guarded_call(
    call: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    a: torch.Tensor,
    b: torch.Tensor,
    g: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``call(a, b)`` as training runs it: grad enabled, on leaves that require grad, then
    its backward on ``g``; (out, dgrad, wgrad), detached."""
    a = a.detach().requires_grad_(True)
    b = b.detach().requires_grad_(True)
    with torch.enable_grad():
        out = call(a, b)
        da, db = torch.autograd.grad(out, (a, b), g)
    return out.detach(), da.detach(), db.detach()


def _dtypes(fmt: str, device: str) -> tuple[torch.dtype, torch.dtype]:
    """(forward operands' FP8 dtype, grad_out's)."""
    fwd = fp8_dtype("e5m2" if fmt.lower() == "e5m2" else "e4m3", device)
    bwd = fp8_dtype("e4m3" if fmt.lower() == "e4m3" else "e5m2", device)
    return fwd, bwd


def dgrad_operands(g: torch.Tensor, b: torch.Tensor, fmt: str, bs: int) -> Operands:
    """float32 (q(grad_out), q(b^T)): dgrad = q(g) @ q(b^T)^T under the blockwise recipe."""
    fwd, bwd = _dtypes(fmt, g.device.type)
    return fake_quantize(g.detach(), bwd, 1, bs), fake_quantize(b.detach().t(), fwd, bs, bs)


def wgrad_operands(g: torch.Tensor, a: torch.Tensor, fmt: str, bs: int, rule: str) -> Operands:
    """float32 (q(grad_out^T), q(a^T)): wgrad = q(g^T) @ q(a^T)^T; ``rule`` picks the
    activation's blocks (``WGRAD_RULES``)."""
    fwd, bwd = _dtypes(fmt, g.device.type)
    rows = 1 if rule == "upstream" else bs
    return fake_quantize(g.detach().t(), bwd, 1, bs), fake_quantize(a.detach().t(), fwd, rows, bs)


def _snr(got: torch.Tensor, operands: Operands) -> float:
    x, y = operands
    if tuple(got.shape) != (x.shape[0], y.shape[0]):
        return float("-inf")
    (c,) = compare([got], x, y)
    return c.snr_db()


def backward_snrs(
    da: torch.Tensor,
    db: torch.Tensor,
    tensors: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    fmt: str,
    bs: int,
) -> dict[str, float]:
    """{"dgrad": dB, "wgrad": dB} of the backward's outputs against the blockwise
    backward recipe's emulation; ``tensors`` = (a, b, grad_out)."""
    a, b, g = tensors
    dgrad = _snr(da, dgrad_operands(g, b, fmt, bs))
    wgrad = max(_snr(db, wgrad_operands(g, a, fmt, bs, rule)) for rule in WGRAD_RULES)
    return {"dgrad": dgrad, "wgrad": wgrad}


def backward_recipe_problems(
    snrs: dict[str, float], granularity: str, bs: int, magnitude: float
) -> list[str]:
    """One problem per backward output below ``RECIPE_SNR`` (``backward_snrs``)."""
    problems = []
    for name, snr in snrs.items():
        if snr >= RECIPE_SNR:
            continue
        operand = "the weight" if name == "dgrad" else "the activation"
        problems.append(
            f"recipe guard: {name} is {snr:.1f} dB from the {granularity.upper()} (block {bs}) "
            f"FP8 backward emulation on outlier gradients, inputs x{magnitude:g} (needs "
            f"{RECIPE_SNR:.0f} dB): the backward does not apply the requested recipe "
            f"(grad_out in 1 x {bs} blocks along the reduction, {operand} in its blocks, "
            "one FP8 GEMM each)"
        )
    return problems
