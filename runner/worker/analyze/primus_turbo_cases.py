"""Launch recipes for Primus-Turbo's own kernels: the calls an op makes into its
kernel files, made on a machine without the build or the GPU (``runner.worker.analyze.standins``)
and recorded (``runner.worker.analyze.launch_log``), so the kernels compile at the configs
upstream's code picks for the target: its autotune lists, its constexprs passed by
keyword, its knobs, its fp8 types.

A recipe names calls of the op, never a kernel or a config: which kernels launch, and
how, is whatever the called code does.  Facts of upstream used here, checked at
AMD-AGI/Primus-Turbo a6a16cdc:

* ``primus_turbo/pytorch/ops/gemm_fp8.py`` ``FP8GemmBlockFunction``: forward quantises
  ``a`` in both directions (``quantize_fp8_with_trans``) and ``b`` with 2D blocks
  (``quantize_fp8`` with ``ScalingRecipe(use_2d_block=True)``), then the GEMM with
  ``trans_a=False``; backward quantises ``grad_out`` both ways, then grad_a with
  ``trans_b`` flipped and grad_b with ``trans_a`` flipped and ``trans_c=trans_b``; the
  default format (E4M3) takes ``float8_e4m3`` for both passes;
* ``primus_turbo/pytorch/kernels/gemm/gemm_fp8_impl.py`` ``GEMMFP8TritonBackend``: the
  blockwise Triton GEMM is ``gemm_fp8_blockwise_triton_kernel`` of
  ``primus_turbo/triton/gemm/gemm_fp8_kernel.py`` with those keywords;
* ``primus_turbo/pytorch/ops/quantization.py`` (its quantisers; they launch the kernels
  of ``primus_turbo/triton/quantization/quant_blockwise.py`` through
  ``primus_turbo/pytorch/kernels/quantization/quantization_impl.py``);
* ``primus_turbo/pytorch/core/low_precision.py``: ``float8_e4m3`` by the device's
  capability (fnuz below 9.5), ``ScalingGranularity``, ``ScalingRecipe``;
* ``primus_turbo/pytorch/core/utils.py``: ``is_gfx950()`` is capability (9, 5), read
  through ``torch.cuda``.

Shapes: M, N, K = 4096, 2048, 1024 (multiples of 128, as the blockwise scales need),
bf16 inputs and output, block size 128; the tensors are empty CPU tensors.
"""

from __future__ import annotations

import hashlib
import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from runner.worker.analyze.launch_log import LaunchLog, Recorded, recording
from runner.worker.analyze.standins import tree_imports

if TYPE_CHECKING:
    from runner.worker.analyze.launches import JitKernel

__all__ = ["RECIPES", "SHAPE", "NoRecipe", "record", "tree_deps"]

TOP = "primus_turbo"
SHAPE = (4096, 2048, 1024)
BLOCK = 128


class NoRecipe(Exception):
    """The op (and granularity) has no launch recipe."""


def _gemm_fp8_blockwise(log: LaunchLog) -> None:
    import torch

    lp = importlib.import_module("primus_turbo.pytorch.core.low_precision")
    quant = importlib.import_module("primus_turbo.pytorch.ops.quantization")
    gemm = importlib.import_module("primus_turbo.triton.gemm.gemm_fp8_kernel")
    m, n, k = SHAPE
    fp8, bf16 = lp.float8_e4m3, torch.bfloat16
    blockwise = lp.ScalingGranularity.BLOCKWISE
    a, b = torch.empty(m, k, dtype=bf16), torch.empty(n, k, dtype=bf16)
    grad_out = torch.empty(m, n, dtype=bf16)
    out = {"out_dtype": bf16}

    log.step = "forward: quantise a"
    a_row, a_row_s, a_col, a_col_s = quant.quantize_fp8_with_trans(
        a, fp8, blockwise, block_size=BLOCK
    )
    log.step = "forward: quantise b (2D blocks)"
    b_2d = lp.ScalingRecipe(use_2d_block=True)
    b_row, b_s = quant.quantize_fp8(b, fp8, blockwise, block_size=BLOCK, scaling_recipe=b_2d)
    log.step = "forward: NT"
    gemm.gemm_fp8_blockwise_triton_kernel(
        a_row, a_row_s, b_row, b_s, trans_a=False, trans_b=True, trans_c=False, **out
    )
    log.step = "backward: quantise grad_out"
    g_row, g_row_s, g_col, g_col_s = quant.quantize_fp8_with_trans(
        grad_out, fp8, blockwise, block_size=BLOCK
    )
    log.step = "backward: grad_a NN"
    gemm.gemm_fp8_blockwise_triton_kernel(
        g_row, g_row_s, b_row, b_s, trans_a=False, trans_b=False, trans_c=False, **out
    )
    log.step = "backward: grad_b TN"
    gemm.gemm_fp8_blockwise_triton_kernel(
        a_col, a_col_s, g_col, g_col_s, trans_a=True, trans_b=False, trans_c=True, **out
    )


RECIPES: dict[tuple[str, str | None], Callable[[LaunchLog], None]] = {
    ("gemm_fp8", "blockwise"): _gemm_fp8_blockwise,
}


def tree_deps(tree: Path) -> dict[str, str]:
    """sha256 of every file of ``tree`` this process imported (the launch sites and
    helpers a compile depends on beside its kernel file)."""
    root = tree.resolve()
    deps = {}
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and Path(path).resolve().is_relative_to(root) and Path(path).is_file():
            rel = str(Path(path).resolve().relative_to(root))
            deps[rel] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return dict(sorted(deps.items()))


def record(
    tree: Path, op: str, granularity: str | None, arch: str
) -> tuple[list[Recorded], list[str]]:
    """The launches the op's recipe makes on ``tree`` for ``arch``, and the modules stood
    in for meanwhile."""
    recipe = RECIPES.get((op, granularity))
    if recipe is None:
        known = ", ".join(f"{o} {g}" for o, g in RECIPES)
        raise NoRecipe(f"no launch recipe for {op} {granularity or ''} (recipes: {known})")
    with tree_imports(tree.resolve(), TOP, arch) as stood_in, recording() as log:
        recipe(log)
    return log.launches, sorted(set(stood_in))


def kernel_file(fn: JitKernel) -> Path:
    """The file a JIT function is defined in."""
    return Path(fn.fn.__code__.co_filename).resolve()
