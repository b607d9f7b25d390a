"""Attention op adapter: ``attention`` (flash-attention forward + backward, bf16).

Call as Primus-Turbo's ``ops.flash_attn_func(q, k, v, causal=causal)`` in its "bshd"
layout: q (B, S, H, D), k and v (B, S, H_kv, D) (grouped-query attention when
H_kv < H), default softmax scale D^-0.5.  Shapes (runner/core/shapes.py): ``b`` = B,
``m`` = ``n`` = S, ``k`` = D, ``params`` heads / kv_heads / causal.

FLOPs, the standard convention: forward 4*B*H*S*S*D (QK^T and PV, 2*B*H*S*S*D each),
halved when causal; backward 2.5x forward (five S x S x D matmuls against two).  The
CSV uses the attention schema (runner/core/csv_schema.py: B, H, S, D, causal, the GEMM-class
metrics, and out/dq/dk/dv SNRs); Combined Step TFLOPS = 3.5x forward FLOPs over the
summed times (runner/judge/scoring.py).

Correctness against a float32 reference (explicit softmax(QK^T * scale) V and its
autograd gradients) from pristine copies of the inputs: SNR >= 30 dB for out, dq, dk
and dv (bf16 rounding alone gives about 50 dB), shapes as the inputs, the inputs
untouched, and two calls on the same input agree.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from runner.core.shapes import ATTENTION_BWD_RATIO
from runner.worker.ops.base import (
    Case,
    CheckResult,
    FreshStep,
    InputFlip,
    OpAdapter,
    Refs,
    fresh_training_step,
    input_problems,
    seeded,
    snr_db,
    snr_verifier,
)

if TYPE_CHECKING:
    from runner.core.shapes import Shape

SNR_THRESHOLD = 30.0
Tensors = tuple[torch.Tensor, ...]


class AttentionOp(OpAdapter):
    name = "attention"

    def call(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
        out: torch.Tensor = self.api.ops.flash_attn_func(q, k, v, causal=causal)
        return out

    def inputs(self, shape: Shape, device: str, seed: int) -> Tensors:
        """q, k, v (requiring grad) and grad_out, bf16, "bshd"."""
        heads, kv_heads = int(shape.params["heads"]), int(shape.params["kv_heads"])
        gen = seeded(device, seed)
        q, k, v, g = (
            torch.randn(shape.b, shape.m, h, shape.k, generator=gen, device=device).to(
                torch.bfloat16
            )
            for h in (heads, kv_heads, kv_heads, heads)
        )
        return q.requires_grad_(True), k.requires_grad_(True), v.requires_grad_(True), g

    def case(self, shape: Shape, device: str, seed: int) -> Case:
        q, k, v, g = self.inputs(shape, device, seed)
        causal = bool(shape.params.get("causal"))
        out = self.call(q, k, v, causal)

        def forward() -> torch.Tensor:
            return self.call(q, k, v, causal)

        def backward() -> Tensors:
            return torch.autograd.grad(out, (q, k, v), g, retain_graph=True)

        flops = shape.flops_fwd

        def refs() -> Refs:  # pristine inputs, drawn again from the seed
            q0, k0, v0, g0 = self.inputs(shape, device, seed)
            ref = attention_reference(q0.detach(), k0.detach(), v0.detach(), g0, causal)
            return {"forward": (("out",), ref[:1]), "backward": (("dq", "dk", "dv"), ref[1:])}

        verify = snr_verifier(refs, _snr_problems)
        flips = {"forward": InputFlip(v), "backward": InputFlip(g, (0, 1, 2))}
        bwd_flops = ATTENTION_BWD_RATIO * flops
        return Case(forward, backward, flops, bwd_flops, verify=verify, flips=flips)

    def fresh_step(self, shape: Shape, device: str, seed: int) -> FreshStep:
        """A training step: q, k, v and grad_out are activations, new values on new
        buffers every step (attention has no weight)."""
        heads, kv_heads = int(shape.params["heads"]), int(shape.params["kv_heads"])
        causal = bool(shape.params.get("causal"))

        def run(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor) -> Tensors:
            out = self.call(q, k, v, causal)
            return (out, *torch.autograd.grad(out, (q, k, v), g))  # no weight: all read

        b, m, d = shape.b, shape.m, shape.k
        fresh = [
            ((b, m, heads, d), True),
            ((b, m, kv_heads, d), True),
            ((b, m, kv_heads, d), True),
            ((b, m, heads, d), False),
        ]
        return fresh_training_step(device, seed, fresh, [], run)

    def check(self, shape: Shape, device: str, seed: int) -> CheckResult:
        q, k, v, g = self.inputs(shape, device, seed)
        causal = bool(shape.params.get("causal"))
        pristine = [t.detach().clone() for t in (q, k, v, g)]
        out = self.call(q, k, v, causal)
        got = (out, *torch.autograd.grad(out, (q, k, v), g))
        ref = attention_reference(pristine[0], pristine[1], pristine[2], pristine[3], causal)
        names = ("out", "dq", "dk", "dv")
        problems = input_problems(("q", "k", "v", "grad_out"), (q, k, v, g), pristine)
        fq, fk, fv = (p.clone().requires_grad_(True) for p in pristine[:3])
        if not torch.equal(self.call(fq, fk, fv, causal).detach(), out.detach()):
            problems.append("two calls on the same input differ (race or stale state)")
        figures = {}
        for name, x, r in zip(names, got, ref, strict=True):
            if x.shape != r.shape:
                problems.append(f"{name} has shape {tuple(x.shape)}, expected {tuple(r.shape)}")
                figures[f"{name}_snr"] = float("-inf")
                continue
            figures[f"{name}_snr"] = snr_db(r, x)
        problems += _snr_problems(figures, got, ref)
        return CheckResult(not problems, figures, problems)


def _snr_problems(figures: dict[str, float], _got: Tensors, _ref: Tensors) -> list[str]:
    return [
        f"{key} {value:.2f} dB below {SNR_THRESHOLD:.0f} dB"
        for key, value in figures.items()
        if not value >= SNR_THRESHOLD
    ]


def attention_reference(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, g: torch.Tensor, causal: bool
) -> Tensors:
    """float32 out, dq, dk, dv of softmax(q k^T / sqrt(D)) v with GQA and the causal
    mask (key j > query i masked), "bshd" layout."""
    q32, k32, v32 = (t.float().requires_grad_(True) for t in (q, k, v))
    rep = q.shape[2] // k.shape[2]
    qh = q32.transpose(1, 2)
    kh = k32.transpose(1, 2).repeat_interleave(rep, dim=1)
    vh = v32.transpose(1, 2).repeat_interleave(rep, dim=1)
    scores = (qh @ kh.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if causal:
        mask = torch.ones(scores.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ vh).transpose(1, 2)
    dq, dk, dv = torch.autograd.grad(out, (q32, k32, v32), g.float())
    return out.detach(), dq, dk, dv
