"""Flash-attention forward Triton kernel (online softmax), layout "bshd".

q (B, S_q, H, D), k and v (B, S_k, H_kv, D); query head h reads KV head
h // (H / H_kv).  One program per (BLOCK_M query rows, batch * head); causal skips the
key blocks above the diagonal.  D must be a power of two >= 16.  ``ATTN_CONFIG`` is
the launch configuration.  The backward is not a kernel here (see the op).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["ATTN_CONFIG", "flash_attn_fwd_triton"]

ATTN_CONFIG: dict[str, int] = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 2}


@triton.jit
def _attn_fwd_kernel(
    q_ptr, k_ptr, v_ptr, o_ptr,
    S_Q, S_K, H, GROUP, scale,
    sqb, sqs, sqh, skb, sks, skh, svb, svs, svh, sob, sos, soh,
    CAUSAL: tl.constexpr, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):  # fmt: skip
    pid_m = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    kvh = h // GROUP
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :],
                mask=offs_m[:, None] < S_Q, other=0.0)  # fmt: skip
    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    hi = tl.minimum(S_K, (pid_m + 1) * BLOCK_M) if CAUSAL else S_K
    for n0 in range(0, hi, BLOCK_N):
        offs_n = n0 + tl.arange(0, BLOCK_N)
        kv_mask = offs_n[:, None] < S_K
        k = tl.load(k_ptr + b * skb + kvh * skh + offs_n[:, None] * sks + offs_d[None, :],
                    mask=kv_mask, other=0.0)  # fmt: skip
        s = tl.dot(q, tl.trans(k)) * scale
        valid = offs_n[None, :] < S_K
        if CAUSAL:
            valid = valid & (offs_n[None, :] <= offs_m[:, None])
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        p = tl.exp(s - m_safe[:, None])
        alpha = tl.exp(m_i - m_safe)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + b * svb + kvh * svh + offs_n[:, None] * svs + offs_d[None, :],
                    mask=kv_mask, other=0.0)  # fmt: skip
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    out = acc / tl.where(l_i == 0.0, 1.0, l_i)[:, None]
    tl.store(o_ptr + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :],
             out.to(o_ptr.dtype.element_ty), mask=offs_m[:, None] < S_Q)  # fmt: skip


def flash_attn_fwd_triton(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, scale: float
) -> torch.Tensor:
    batch, s_q, heads, d = q.shape
    _, s_k, kv_heads, _ = k.shape
    if d < 16 or d & (d - 1):
        raise ValueError(f"head dim {d} must be a power of two >= 16")
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads are not a multiple of {kv_heads} KV heads")
    q, k, v = (t if t.stride(-1) == 1 else t.contiguous() for t in (q, k, v))
    o = torch.empty_like(q)
    cfg = ATTN_CONFIG
    grid = (triton.cdiv(s_q, cfg["BLOCK_M"]), batch * heads)
    _attn_fwd_kernel[grid](
        q, k, v, o, s_q, s_k, heads, heads // kv_heads, scale,
        q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
        CAUSAL=causal, D=d, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
        num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
    )  # fmt: skip
    return o
