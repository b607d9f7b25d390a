"""The recipe guard and the checked training step on a GPU: the example's honest
blockwise FP8 GEMM passes both, and each planted shortcut of ``tests/data/redteam``
where training runs the op (a backward without the blockwise recipe, a recipe switched
on autograd mode, a dgrad memo kept past a weight step) is refused with the guard
named.  Run by ``benchmarks/recipe_guard_h200.sh``; prints one line per (shortcut,
shape) and exits 1 when an expectation fails.
"""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

import torch

from runner.core.shapes import Shape
from runner.ops.base import CHECKED_STEP
from runner.ops.gemm import Fp8GemmOp
from runner.targets.example import EXAMPLE

ROOT = Path(__file__).resolve().parents[1]
SHORTCUTS = {  # patch -> the guard's words that must refuse it
    "backward_recipe_downgrade": "recipe guard: dgrad is ",
    "recipe_switched_on_autograd": "recipe guard: out is ",
    "autograd_node_memo": CHECKED_STEP,
}
SHAPES = (
    Shape("recipe-64x256x384", m=64, n=256, k=384),
    Shape("Llama-2-7B-attn_out-mb1-4096x4096x4096", m=4096, n=4096, k=4096),
)


def planted(name: str, folder: Path) -> Any:
    """The example's ``gemm_fp8`` with ``tests/data/redteam/<name>.patch`` applied to a
    copy of the package (as ``tests/test_recipe_guard.py`` plants it)."""
    work = folder / name
    shutil.copytree(ROOT / "examples" / "turbo_kernels", work / "turbo_kernels")
    patch = ROOT / "tests" / "data" / "redteam" / f"{name}.patch"
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    path = work / "turbo_kernels" / "pytorch" / "ops" / "gemm_fp8.py"
    spec = importlib.util.spec_from_file_location(f"planted_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.gemm_fp8


def with_gemm_fp8(gemm_fp8: Any) -> Any:
    api = EXAMPLE.load_api()
    ops = types.SimpleNamespace(gemm_fp8=gemm_fp8)
    return types.SimpleNamespace(
        ops=ops,
        Format=api.Format,
        ScalingGranularity=api.ScalingGranularity,
        Float8QuantConfig=api.Float8QuantConfig,
        ScaleDtype=api.ScaleDtype,
    )


def judged(api: Any, shape: Shape) -> tuple[list[str], dict[str, float], float, float]:
    """(problems of the check and of the checked training step, figures, seconds of
    each)."""
    op = Fp8GemmOp(api, {"granularity": "blockwise"})
    t0 = time.perf_counter()
    result = op.check(shape, "cuda", 11)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    stepped = op.fresh_step(shape, "cuda", 11).checked()
    torch.cuda.synchronize()
    return result.problems + stepped, result.figures, t1 - t0, time.perf_counter() - t1


def main() -> int:
    failures = 0
    folder = Path(tempfile.mkdtemp(prefix="recipe-guard-"))
    candidates = {"honest": EXAMPLE.load_api().ops.gemm_fp8}
    candidates |= {name: planted(name, folder) for name in SHORTCUTS}
    for shape in SHAPES:
        for name, gemm_fp8 in candidates.items():
            problems, figures, check_s, step_s = judged(with_gemm_fp8(gemm_fp8), shape)
            words = SHORTCUTS.get(name)
            named = [p for p in problems if words and words in p]
            good = not problems if words is None else bool(named)
            failures += not good
            shown = {k: round(v, 1) for k, v in figures.items()}
            print(
                f"{'OK ' if good else 'BAD'} {name} {shape.label}: check {check_s:.2f} s, "
                f"checked step {step_s:.2f} s, figures {shown}"
            )
            for p in (named or problems)[:2]:
                print(f"    {p}")
    print(f"{failures} unexpected verdict(s) on {torch.cuda.get_device_name()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
