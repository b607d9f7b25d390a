"""Grouped GEMM op adapters: ``grouped_gemm`` (bf16) and ``grouped_gemm_fp8``.

Layout and call as Primus-Turbo's MoE expert GEMMs:
``out = ops.grouped_gemm(a, b, group_lens, trans_b=True)`` and
``ops.grouped_gemm_fp8(a, b, group_lens, trans_b=True, config=cfg)`` with a the
(sum(group_lens), K) token rows sorted by expert, b the (G, N, K) expert weights and
``group_lens`` the tokens per expert as a RUNTIME int64 tensor on the device (never a
layout constant: the sizes come from runner/core/moe_routing.py and may be skewed or zero).

FLOPs from the real group sizes (``Shape.flops_fwd``: sum of 2*g*N*K); backward 2x
forward (grad_a and grad_b).  Correctness against a float32 per-group reference built
from pristine copies of the inputs, with the thresholds of runner/worker/ops/gemm.py (SNR for
FP8, normalised allclose for bf16), plus: the inputs (group_lens included) untouched,
and two calls on the same input agree.  A kernel that assumes uniform groups fails on
the skewed shapes (wrong rows per expert: a low SNR or a shape mismatch).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from runner.worker.ops.base import (
    Case,
    CheckResult,
    FreshStep,
    InputFlip,
    Refs,
    fresh_training_step,
    input_problems,
    seeded,
    snr_db,
    snr_verifier,
)
from runner.worker.ops.gemm import Fp8GemmOp, GemmOp, snr_judge
from runner.worker.ops.recipe import (
    grouped_recipe_problems,
    guarded_outputs,
    judged_in_both_modes,
    recipe_operands,
)

if TYPE_CHECKING:
    from runner.core.shapes import Shape
    from runner.targets.base import TargetAPI
    from runner.worker.ops.base import Options

Inputs = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


class GroupedGemmOp(GemmOp):
    name = "grouped_gemm"

    def grouped_call(self, a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.api.ops.grouped_gemm(a, b, lens, trans_b=True)
        return out

    def grouped_inputs(self, shape: Shape, device: str, seed: int) -> Inputs:
        """a (M, K), b (G, N, K), grad_out (M, N) in bf16; group_lens int64 (G,)."""
        sizes = _sizes(shape)
        rows = sum(sizes)
        gen = seeded(device, seed)
        a, b, g = (
            torch.randn(*dims, generator=gen, device=device).to(torch.bfloat16)
            for dims in ((rows, shape.k), (len(sizes), shape.n, shape.k), (rows, shape.n))
        )
        lens = torch.tensor(sizes, dtype=torch.int64, device=device)
        return a.requires_grad_(True), b.requires_grad_(True), lens, g

    def case(self, shape: Shape, device: str, seed: int) -> Case:
        a, b, lens, g = self.grouped_inputs(shape, device, seed)
        out = self.grouped_call(a, b, lens)

        def forward() -> torch.Tensor:
            return self.grouped_call(a, b, lens)

        def backward() -> tuple[torch.Tensor, ...]:
            return torch.autograd.grad(out, (a, b), g, retain_graph=True)

        flops = shape.flops_fwd

        def refs() -> Refs:  # pristine inputs, drawn again from the seed
            a0, b0, lens0, g0 = self.grouped_inputs(shape, device, seed)
            ref_out, ref_da, ref_db = grouped_reference(a0.detach(), b0.detach(), lens0, g0)
            return {"forward": (("out",), (ref_out,)), "backward": (("da", "db"), (ref_da, ref_db))}

        flips = {"forward": InputFlip(a), "backward": InputFlip(g, (0, 1))}
        verify = snr_verifier(refs, self.judge)
        return Case(forward, backward, flops, 2.0 * flops, verify=verify, flips=flips)

    def fresh_step(self, shape: Shape, device: str, seed: int) -> FreshStep:
        """As GemmOp.fresh_step: new token rows and grad_out every step, the same
        routing (group_lens), a small SGD step on the expert weights after it."""
        _a, w, lens, _g = self.grouped_inputs(shape, device, seed)
        rows = int(lens.sum().item())

        def run(a: torch.Tensor, g: torch.Tensor) -> tuple[torch.Tensor, ...]:
            out = self.grouped_call(a, w, lens)
            return (out, *torch.autograd.grad(out, (a, w), g))  # out, dgrad, wgrad

        fresh = [((rows, shape.k), True), ((rows, shape.n), False)]
        return fresh_training_step(device, seed, fresh, [w], run)

    def simulation(self, shape: Shape, device: str) -> None:
        """No 8-step simulation for grouped GEMMs (its op is not ``op(a, w)``): the
        fresh step's paired gain and the timed-output checks judge their state."""
        return None

    def check(self, shape: Shape, device: str, seed: int) -> CheckResult:
        a, b, lens, g = self.grouped_inputs(shape, device, seed)
        pristine = [t.detach().clone() for t in (a, b, lens, g)]
        out = self.grouped_call(a, b, lens)
        da, db = torch.autograd.grad(out, (a, b), g)
        ref = grouped_reference(*pristine)
        names = ("a", "b", "group_lens", "grad_out")
        problems = input_problems(names, (a, b, lens, g), pristine)
        again = self.grouped_call(
            a.detach().clone().requires_grad_(True), b.detach().clone(), lens.clone()
        )
        if not torch.equal(again, out.detach()):
            problems.append("two calls on the same input differ (race or stale state)")
        got = (out, da, db)
        figures = {
            f"{n}_snr": snr_db(r, x) if x.shape == r.shape else float("-inf")
            for n, x, r in zip(("out", "da", "db"), got, ref, strict=True)
        }
        problems += self.judge(figures, got, ref)
        return CheckResult(not problems, figures, problems)


class Fp8GroupedGemmOp(GroupedGemmOp):
    name = "grouped_gemm_fp8"

    def __init__(self, api: TargetAPI, options: Options) -> None:
        super().__init__(api, options)
        fp8 = Fp8GemmOp(api, options)  # builds the Float8QuantConfig and the threshold
        self.config, self.threshold, self.recipe = fp8.config, fp8.threshold, fp8.recipe

    def check(self, shape: Shape, device: str, seed: int) -> CheckResult:
        """``GroupedGemmOp.check``, then the recipe guard group by group on the
        recipe's inputs (``runner.worker.ops.recipe.grouped_recipe_problems``)."""
        result = super().check(shape, device, seed)
        sizes = list(_sizes(shape))
        gran, _, bs = self.recipe
        a, flat = recipe_operands(
            gran, sum(sizes), len(sizes) * shape.n, shape.k, device, seed + 1, bs
        )
        b = flat.reshape(len(sizes), shape.n, shape.k)
        lens = torch.tensor(sizes, dtype=torch.int64, device=device)
        outputs = guarded_outputs(self.grouped_call, a, b, lens)
        snr, problems = judged_in_both_modes(
            outputs, lambda out: grouped_recipe_problems(out, a, b, sizes, self.recipe)
        )
        if snr != float("inf"):
            result.figures["recipe_snr"] = snr
        result.problems += problems
        result.ok = result.ok and not problems
        return result

    def grouped_call(self, a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.api.ops.grouped_gemm_fp8(
            a, b, lens, trans_b=True, config=self.config
        )
        return out

    def judge(
        self,
        figures: dict[str, float],
        got: tuple[torch.Tensor, ...],
        ref: tuple[torch.Tensor, ...],
    ) -> list[str]:
        return snr_judge(figures, got, ref, self.threshold)


def _sizes(shape: Shape) -> tuple[int, ...]:
    if shape.group_sizes is None:  # a plain batched shape: B equal groups of M rows
        return (shape.m,) * shape.b
    return tuple(shape.group_sizes)


def grouped_reference(
    a: torch.Tensor, b: torch.Tensor, lens: torch.Tensor, g: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """float32 out[rows of e] = a[rows of e] @ b[e]^T, and its gradients, group by group
    (an empty group contributes no rows and a zero weight gradient)."""
    a32, b32, g32 = a.float(), b.float(), g.float()
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
    da = torch.zeros_like(a32)
    db = torch.zeros_like(b32)
    start = 0
    for e, rows in enumerate(lens.tolist()):
        sl = slice(start, start + rows)
        out[sl] = a32[sl] @ b32[e].t()
        da[sl] = g32[sl] @ b32[e]
        db[e] = g32[sl].t() @ a32[sl]
        start += rows
    return out, da, db
