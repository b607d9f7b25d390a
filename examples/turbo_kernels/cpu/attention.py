"""Attention, torch backend: explicit ``softmax(Q K^T * scale) V`` in float32.

q (B, S_q, H, D), k and v (B, S_k, H_kv, D) with H a multiple of H_kv (grouped-query
attention: each KV head serves H / H_kv query heads); causal masks key j > query i
(top-left aligned).  Differentiable through torch autograd (the backward).
"""

from __future__ import annotations

import torch

__all__ = ["attention_torch"]


def attention_torch(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> torch.Tensor:
    heads, kv_heads = q.shape[2], k.shape[2]
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    rep = heads // kv_heads
    qf = q.float().transpose(1, 2)  # (B, H, S_q, D)
    kf = k.float().transpose(1, 2).repeat_interleave(rep, dim=1)
    vf = v.float().transpose(1, 2).repeat_interleave(rep, dim=1)
    scores = (qf @ kf.transpose(-1, -2)) * scale
    if causal:
        s_q, s_k = scores.shape[-2:]
        mask = torch.ones(s_q, s_k, dtype=torch.bool, device=q.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ vf
    return out.transpose(1, 2).to(q.dtype)
