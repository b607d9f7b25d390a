"""FP8 quantisation Triton kernels (activations, scales along the last dim).

``scale_inv = max(amax, 1e-12) / fp8_max`` per scaling group and
``x_fp8 = cast(clamp(x / scale_inv))`` (round-to-nearest division, saturating), as the
torch path.  One program per (row, block) for BLOCKWISE, one per row for ROWWISE (two
sweeps: amax, then quantise); TENSORWISE reduces the amax with torch, then one
element-wise launch.  ``QUANT_CONFIG`` is the launch configuration.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

__all__ = ["QUANT_CONFIG", "quantize_fp8_triton"]

QUANT_CONFIG: dict[str, int] = {"ROW_BLOCK": 1024, "num_warps": 4}


@triton.jit
def _quant_groups_kernel(
    x_ptr, q_ptr, s_ptr, N, stride_xm, stride_qm, n_groups, FP8_MAX: tl.constexpr,
    GROUP: tl.constexpr, BLOCK: tl.constexpr,
):  # fmt: skip
    """One program per (row, scaling group of GROUP columns), swept in BLOCK chunks."""
    row = tl.program_id(0)
    grp = tl.program_id(1)
    start = grp * GROUP
    end = tl.minimum(start + GROUP, N)
    run_max = tl.zeros([BLOCK], dtype=tl.float32)
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_xm + cols, mask=cols < end, other=0.0).to(tl.float32)
        run_max = tl.maximum(run_max, tl.abs(x))
    scale = tl.div_rn(tl.maximum(tl.max(run_max, axis=0), 1e-12), FP8_MAX)
    for c0 in range(start, end, BLOCK):
        cols = c0 + tl.arange(0, BLOCK)
        mask = cols < end
        x = tl.load(x_ptr + row * stride_xm + cols, mask=mask, other=0.0).to(tl.float32)
        y = tl.clamp(tl.div_rn(x, scale), -FP8_MAX, FP8_MAX)
        tl.store(q_ptr + row * stride_qm + cols, y.to(q_ptr.dtype.element_ty), mask=mask)
    tl.store(s_ptr + row * n_groups + grp, scale)


@triton.jit
def _quant_tensor_kernel(x_ptr, q_ptr, s_ptr, numel, FP8_MAX: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    scale = tl.load(s_ptr)
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.clamp(tl.div_rn(x, scale), -FP8_MAX, FP8_MAX)
    tl.store(q_ptr + offs, y.to(q_ptr.dtype.element_ty), mask=mask)


def quantize_fp8_triton(
    x: torch.Tensor, out_dtype: torch.dtype, granularity: str, block_size: int | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``granularity`` is "tensorwise", "rowwise" or "blockwise" (1 x block_size)."""
    if x.dim() != 2:
        raise ValueError(f"quantize_fp8 expects a 2-D tensor, got shape {tuple(x.shape)}")
    x = x.contiguous()
    m, n = x.shape
    fp8_max = float(torch.finfo(out_dtype).max)
    q = torch.empty((m, n), dtype=out_dtype, device=x.device)
    cfg = QUANT_CONFIG
    if granularity == "tensorwise":
        amax = x.abs().amax().float().clamp(min=1e-12)
        # a tensor divisor: correctly rounded, as the torch path (see quantization.py);
        # filled on the device, so the step stays capturable in a CUDA graph
        fp8_max_t = torch.full((), fp8_max, dtype=torch.float32, device=x.device)
        scale = (amax / fp8_max_t).reshape(())
        block = cfg["ROW_BLOCK"]
        _quant_tensor_kernel[(triton.cdiv(m * n, block),)](
            x, q, scale, m * n, FP8_MAX=fp8_max, BLOCK=block, num_warps=cfg["num_warps"]
        )
        return q, scale.contiguous()
    group = n if granularity == "rowwise" else int(block_size or 128)
    n_groups = triton.cdiv(n, group)
    scales = torch.empty((m, n_groups), dtype=torch.float32, device=x.device)
    chunk = min(cfg["ROW_BLOCK"], triton.next_power_of_2(group))
    _quant_groups_kernel[(m, n_groups)](
        x, q, scales, n, x.stride(0), q.stride(0), n_groups,
        FP8_MAX=fp8_max, GROUP=group, BLOCK=chunk, num_warps=cfg["num_warps"],
    )  # fmt: skip
    return q, (scales.reshape(m) if granularity == "rowwise" else scales)
