# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""Grouped GEMM for MoE (sample modelled on primus_turbo/pytorch/ops/grouped_gemm.py)."""

import torch
import triton
import triton.language as tl


@triton.jit
def grouped_gemm_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    group_offs_ptr,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
):
    g = tl.program_id(1)
    m_start = tl.load(group_offs_ptr + g)
    m_end = tl.load(group_offs_ptr + g + 1)
    m_size = m_end - m_start
    pid_m = tl.program_id(0)
    if pid_m * BLOCK_M >= m_size:
        return
    offs_m = m_start + pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m < m_end
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(
            a_ptr + offs_m[:, None] * K + (k * BLOCK_K + offs_k)[None, :],
            mask=mask_m[:, None],
            other=0.0,
        )
        b = tl.load(b_ptr + g * N * K + offs_n[None, :] * K + (k * BLOCK_K + offs_k)[:, None])
        acc += tl.dot(a, b)
    tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask_m[:, None])


def grouped_gemm(a, b, group_lens):
    """a: (sum(group_lens), K) tokens; b: (G, N, K) expert weights."""
    G, N, K = b.shape
    M = a.shape[0]
    assert M % G == 0, "tokens must split evenly across experts"
    group_offs = torch.zeros(G + 1, dtype=torch.int64, device=a.device)
    group_offs[1:] = torch.cumsum(group_lens, 0)
    max_m = int(group_lens.max())
    c = torch.empty((a.shape[0], N), dtype=a.dtype, device=a.device)
    grid = (triton.cdiv(max_m, 64), G)
    grouped_gemm_kernel[grid](a, b, c, group_offs, N, K, BLOCK_M=64, BLOCK_N=N, BLOCK_K=64)
    return c


def grouped_gemm_reference(a, b, group_lens):
    outs = [x @ w.t() for x, w in zip(a.split(group_lens.tolist()), b)]
    return torch.cat(outs)
