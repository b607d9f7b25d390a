"""Primus-Turbo (AMD-AGI/Primus-Turbo), the real target.  Needs ROCm to run.

Facts used (PROTOCOL.md section 9): package ``primus_turbo``; user API in
``primus_turbo/pytorch/ops/``; Triton kernels in ``primus_turbo/triton/``; HIP/CK
kernels in ``csrc/kernels/`` (edits there need the editable install re-run); tests in
``tests/pytorch/``; benchmarks in ``benchmark/ops/``; backend selectors
``PRIMUS_TURBO_GEMM_BACKEND``, ``PRIMUS_TURBO_GROUPED_GEMM_BACKEND``,
``PRIMUS_TURBO_ATTENTION_BACKEND``.
"""

from __future__ import annotations

import os
from pathlib import Path

from runner.cmd import run
from runner.errors import ConfigError
from runner.targets.base import Target

REINSTALL_HINT = (
    "pip uninstall -y primus_turbo && pip install -r requirements.txt && "
    "GPU_ARCHS={archs} pip install --no-build-isolation -e . -v"
)

_BENCH_SCRIPT = {
    "gemm": "bench_gemm_turbo.py",
    "gemm_fp8": "bench_gemm_turbo.py",
    "grouped_gemm": "bench_grouped_gemm_turbo.py",
    "grouped_gemm_fp8": "bench_grouped_gemm_turbo.py",
    "attention": "bench_attention_turbo.py",
}
# The focused test file per op (tests/pytorch/ops/): grouped GEMM's FP8 path and the
# attention op have their own names upstream.
_TEST_FILE = {
    "quantize": "test_quantization.py",
    "attention": "test_attention.py",
}


class PrimusTurboTarget(Target):
    def test_command(self, op: str, granularity: str | None, backend: str) -> str:
        terms = [t for t in (granularity, backend.upper()) if t]
        select = f' -k "{" and ".join(terms)}"' if terms else ""
        test_file = _TEST_FILE.get(op, f"test_{op}.py")
        return f"pytest tests/pytorch/ops/{test_file} -v{select}"

    def benchmark_command(self, op: str, granularity: str | None, backend: str) -> str:
        script = _BENCH_SCRIPT.get(op)
        if script is None:
            raise ConfigError(f"no Primus-Turbo benchmark known for op {op}")
        env = " ".join(f"{k}={v}" for k, v in self.selector_env(op, backend).items())
        args = ""
        if op.endswith("fp8"):
            args = " --dtype fp8" + (f" --granularity {granularity}" if granularity else "")
        return f"{env} python benchmark/ops/{script}{args}".strip()

    def full_suite_command(self) -> str:
        return "pytest tests/pytorch/ -v"

    def install_commands(self, gpu_archs: str | None = None) -> list[list[str]]:
        archs = gpu_archs or "native"
        return [
            ["pip", "uninstall", "-y", "primus_turbo"],
            ["pip", "install", "-r", "requirements.txt"],
            [
                "env",
                f"GPU_ARCHS={archs}",
                "pip",
                "install",
                "--no-build-isolation",
                "-e",
                ".",
                "-v",
            ],
        ]

    def job_env(self, source_dir: Path, op: str, backend: str) -> dict[str, str]:
        env = dict(self.selector_env(op, backend))
        env["MAX_JOBS"] = os.environ.get("MAX_JOBS", "64")
        # The tree under test first on the path: built in place (local), it is what
        # every process of the job imports, a script run from elsewhere included; in
        # the image it is the editable install's own location.
        env["PYTHONPATH"] = str(source_dir)
        return env

    def build_commands(self, gpu_archs: str | None, *, in_place: bool) -> list[list[str]]:
        """In the image: the editable install of the role's tree (ccache keeps a
        rebuild short), then the check that pip reports it editable from that tree.
        In place (a host with ROCm and the upstream requirements): the extensions are
        compiled into the tree itself, which the worker imports from its cwd."""
        if in_place:
            return [["python", "setup.py", "build_ext", "--inplace"]]
        check = ["python", "-m", "runner.targets.buildcheck", self.name, "."]
        return [*self.install_commands(gpu_archs), check]

    def build_env(self, gpu_archs: str | None) -> dict[str, str]:
        env = {"MAX_JOBS": os.environ.get("MAX_JOBS", "64")}
        if gpu_archs:
            env["GPU_ARCHS"] = gpu_archs
        return env

    def check_build(self, root: Path) -> None:
        check_editable_install(root)


def parse_pip_show(text: str) -> dict[str, str]:
    """``pip show`` output as a dict of its ``Key: value`` fields."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key and not key.startswith(" "):
            fields[key.strip()] = value.strip()
    return fields


def check_editable_install(
    source: Path, pip_show_output: str | None = None, gpu_archs: str | None = None
) -> None:
    """Before any round: ``pip show primus_turbo`` must report an editable install whose
    location is ``source``; otherwise stop with the command that fixes it."""
    if pip_show_output is None:
        proc = run(["python", "-m", "pip", "show", "primus_turbo"], check=False)
        pip_show_output = proc.stdout if proc.returncode == 0 else ""
    fields = parse_pip_show(pip_show_output)
    location = fields.get("Editable project location")
    fix = f"cd {source} && " + REINSTALL_HINT.format(archs=gpu_archs or "native")
    if not fields:
        raise ConfigError(f"primus_turbo is not installed; install it editable: {fix}")
    if not location:
        raise ConfigError(
            "primus_turbo is installed but not editable (no 'Editable project location'); "
            f"a copy in site-packages would be measured instead of your tree: {fix}"
        )
    if Path(location).resolve() != Path(source).resolve():
        raise ConfigError(
            f"primus_turbo is editable-installed from {location}, not from the source "
            f"being measured ({source}): {fix}"
        )


PRIMUS_TURBO = PrimusTurboTarget(
    name="primus-turbo",
    package="primus_turbo",
    api_modules=("primus_turbo.pytorch.ops", "primus_turbo.pytorch.core.low_precision"),
    backend_env={
        "gemm": "PRIMUS_TURBO_GEMM_BACKEND",
        "grouped_gemm": "PRIMUS_TURBO_GROUPED_GEMM_BACKEND",
        "attention": "PRIMUS_TURBO_ATTENTION_BACKEND",
    },
    code_map={
        ("gemm", "TRITON"): ("primus_turbo/triton/gemm/gemm_kernel.py",),
        ("gemm_fp8", "TRITON"): ("primus_turbo/triton/gemm/gemm_fp8_kernel.py",),
        ("gemm", "CK"): ("csrc/kernels/gemm/",),
        ("gemm_fp8", "CK"): ("csrc/kernels/gemm/",),
        ("gemm", "HIPBLASLT"): ("csrc/kernels/gemm/",),
        ("gemm_fp8", "HIPBLASLT"): ("csrc/kernels/gemm/",),
        ("grouped_gemm", "TRITON"): ("primus_turbo/triton/grouped_gemm/grouped_gemm_kernel.py",),
        ("grouped_gemm_fp8", "TRITON"): (
            "primus_turbo/triton/grouped_gemm/grouped_gemm_fp8_kernel.py",
        ),
        ("grouped_gemm", "CK"): ("csrc/kernels/grouped_gemm/",),
        ("grouped_gemm_fp8", "CK"): ("csrc/kernels/grouped_gemm/",),
        ("attention", "TRITON"): ("primus_turbo/triton/attention/attention_kernel.py",),
        ("attention", "CK"): ("csrc/kernels/attention/",),
        ("quantize", "TRITON"): ("primus_turbo/triton/quantization/quant_blockwise.py",),
        ("quantize", "CK"): ("csrc/kernels/quantization/",),
    },
    rebuild_globs=("csrc/**", "setup.py", "CMakeLists.txt"),
    editable_install=True,
    native_modules=("primus_turbo.pytorch._C",),  # setup.py's CUDAExtension (a6a16cdc)
)
