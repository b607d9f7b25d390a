# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""Triton FP8 blockwise GEMM (sample modelled on primus_turbo/triton/gemm/gemm_fp8_kernel.py)."""

import functools

import torch
import triton
import triton.language as tl


def _configs():
    return [
        triton.Config(
            {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8},
            num_warps=8,
            num_stages=2,
        ),
    ]


@triton.autotune(configs=_configs(), key=["M", "N", "K"])
@triton.jit
def gemm_fp8_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    a_s_ptr,
    b_s_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_bn,
    stride_bk,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    GROUP_M: tl.constexpr,
):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        a = tl.load(
            a_ptr + offs_m[:, None] * stride_am + (k * BLOCK_K + offs_k)[None, :] * stride_ak
        )
        b = tl.load(
            b_ptr + offs_n[None, :] * stride_bn + (k * BLOCK_K + offs_k)[:, None] * stride_bk
        )
        a_s = tl.load(a_s_ptr + offs_m * tl.cdiv(K, BLOCK_K) + k)
        b_s = tl.load(b_s_ptr + pid_n * tl.cdiv(K, BLOCK_K) + k)
        acc += tl.dot(a, b) * a_s[:, None] * b_s
    c = acc.to(c_ptr.dtype.element_ty)
    tl.store(c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn, c)


@functools.lru_cache(maxsize=64)
def _grid_for(M: int, N: int, K: int):
    return lambda meta: (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)


def gemm_fp8_blockwise(a, b, a_scale, b_scale):
    M, K = a.shape
    N = b.shape[0]
    assert K % 128 == 0, "blockwise FP8 needs K aligned to the 128 scale block"
    c = torch.empty((M, N), device=a.device, dtype=torch.bfloat16)
    gemm_fp8_kernel[_grid_for(M, N, K)](
        a,
        b,
        c,
        a_scale,
        b_scale,
        M,
        N,
        K,
        a.stride(0),
        a.stride(1),
        b.stride(0),
        b.stride(1),
        c.stride(0),
        c.stride(1),
    )
    return c
