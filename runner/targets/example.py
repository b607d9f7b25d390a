"""The bundled example kernel package (``examples/``, import ``turbo_kernels``).

Pure Python + Triton: nothing needs a rebuild; the worker imports the measured tree
through PYTHONPATH, so each fresh worktree is measured as it is.
"""

from __future__ import annotations

from pathlib import Path

from runner.targets.base import Target

_FP8_KERNELS = ("turbo_kernels/triton/gemm_fp8_kernel.py",)
_CPU_FP8 = ("turbo_kernels/cpu/gemm_fp8.py",)
# The FP8 GEMM's code path besides its kernel: the op (autograd, what it quantises and
# keeps for the backward) and the FP8 quantisation it calls.  A round may change them
# (the demo's accepted speed-up reuses the forward's FP8 weight in the op).
_FP8_OP = ("turbo_kernels/pytorch/ops/gemm_fp8.py", "turbo_kernels/pytorch/kernels/quantization.py")
_GROUPED = ("turbo_kernels/triton/grouped_gemm_kernel.py",)
_CPU_GROUPED = ("turbo_kernels/cpu/grouped_gemm.py",)


# The example's scaling granularities as its tests name them in their ids.
_GRANULARITIES = ("tensorwise", "rowwise", "blockwise", "mx_blockwise")


def granularity_terms(granularity: str) -> str:
    """A ``-k`` term that selects ``granularity``'s tests and no other granularity's:
    pytest matches substrings, so "blockwise" alone also selects every MX_BLOCKWISE
    test (more tests, and on a GPU their Triton kernels compiled, in every focused test)."""
    name = granularity.lower()
    wider = [g for g in _GRANULARITIES if g != name and name in g]
    return " and ".join([name, *(f"not {g}" for g in wider)])


class ExampleTarget(Target):
    def test_command(self, op: str, granularity: str | None, backend: str) -> str:
        # the op's contract tests (FP8 really used, the granularity really applied)
        # run whatever granularity selects the rest (docs/reliability.md §8, the recipe guard)
        select = f' -k "({granularity_terms(granularity)}) or contract"' if granularity else ""
        return f"python -m pytest tests/test_example_{op}.py -q -p no:cacheprovider{select}"

    def benchmark_command(self, op: str, granularity: str | None, backend: str) -> str:
        gran = f" --granularity {granularity}" if granularity else ""
        var = next(iter(self.selector_env(op, backend)), "TURBO_KERNELS_GEMM_BACKEND")
        return f"{var}={backend.upper()} python -m runner.worker.fullbench --op {op}{gran}"

    def workspace_scaffolding(
        self, op: str, granularity: str | None, backend: str
    ) -> dict[str, list[str]]:
        tests = [f"tests/test_example_{op}.py", "tests/conftest.py", "tests/example_helpers.py"]
        return {"tests": tests, "bench": []}  # the benchmark is runner.worker.fullbench

    def full_suite_command(self) -> str:
        return "python -m pytest tests -q"

    def install_commands(self, gpu_archs: str | None = None) -> list[list[str]]:
        return [["python", "-m", "pip", "install", "-e", "."]]

    def job_env(self, source_dir: Path, op: str, backend: str) -> dict[str, str]:
        env = {"PYTHONPATH": str(source_dir)}
        env.update(self.selector_env(op, backend))
        return env


EXAMPLE = ExampleTarget(
    name="example",
    package="turbo_kernels",
    cpu_backends=("TORCH",),  # the Triton kernels need a GPU
    api_modules=("turbo_kernels.pytorch.ops", "turbo_kernels.pytorch.core.low_precision"),
    backend_env={
        "gemm": "TURBO_KERNELS_GEMM_BACKEND",
        "grouped_gemm": "TURBO_KERNELS_GROUPED_GEMM_BACKEND",
        "quantize": "TURBO_KERNELS_QUANTIZE_BACKEND",
        "attention": "TURBO_KERNELS_ATTENTION_BACKEND",
    },
    code_map={
        ("gemm", "TRITON"): ("turbo_kernels/triton/gemm_kernel.py",),
        ("gemm", "TORCH"): ("turbo_kernels/cpu/gemm.py",),
        ("gemm_fp8", "TRITON"): (*_FP8_KERNELS, *_FP8_OP),
        ("gemm_fp8", "TORCH"): (*_CPU_FP8, *_FP8_OP),
        ("grouped_gemm", "TRITON"): _GROUPED,
        ("grouped_gemm", "TORCH"): _CPU_GROUPED,
        ("grouped_gemm_fp8", "TRITON"): (
            *_FP8_KERNELS,
            "turbo_kernels/pytorch/ops/grouped_gemm_fp8.py",
        ),
        ("grouped_gemm_fp8", "TORCH"): (*_CPU_FP8, "turbo_kernels/pytorch/ops/grouped_gemm_fp8.py"),
        ("quantize", "TRITON"): ("turbo_kernels/triton/quantize_kernel.py",),
        ("quantize", "TORCH"): ("turbo_kernels/pytorch/kernels/quantization.py",),
        ("attention", "TRITON"): ("turbo_kernels/triton/attention_kernel.py",),
        ("attention", "TORCH"): ("turbo_kernels/cpu/attention.py",),
    },
)
