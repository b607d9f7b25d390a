"""Primus-Turbo (AMD-AGI/Primus-Turbo), the real target.  Needs ROCm to run.

Every upstream fact below (paths, benchmark flags, selector variables, the backends each
op registers, which files run for each op and backend, the MX config) was checked
against AMD-AGI/Primus-Turbo at commit ``a6a16cdce46bd2235a248b41f501fb363c215b9b``
(2026-08-21); docs/primus-turbo.md ("Upstream facts, checked at a6a16cdc") says where
each comes from.  ``campaign init`` refuses anything these tables do not list, and with
a checkout as ``--source`` it checks that the named files exist there.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from runner.core.errors import ConfigError
from runner.core.processes import run
from runner.targets.base import Target
from runner.targets.build_facts import BUILD_CK_ENV, FRAMEWORK_ENV, build_facts, missing_backend
from runner.targets.upstream_csv import BENCH_CSV_NAME

UPSTREAM_COMMIT = "a6a16cdce46bd2235a248b41f501fb363c215b9b"

REINSTALL_HINT = (
    "pip uninstall -y primus_turbo && pip install -r requirements.txt && "
    "GPU_ARCHS={archs} pip install --no-build-isolation -e . -v"
)

# The selector variables upstream reads (primus_turbo/common/constants.py): one for
# GEMM (bf16 and FP8 alike, optionally per precision "FP8:CK,other:TRITON"), one for
# grouped GEMM, one for dense/varlen flash attention.  Quantisation has none: its
# granularity decides the kernel.
GEMM_ENV = "PRIMUS_TURBO_GEMM_BACKEND"
GROUPED_GEMM_ENV = "PRIMUS_TURBO_GROUPED_GEMM_BACKEND"
ATTN_ENV = "PRIMUS_TURBO_ATTN_BACKEND"

# (op, granularity) -> the backends upstream registers for it (the dispatcher tables in
# primus_turbo/pytorch/kernels/*/..._impl.py, filtered by each backend's
# SUPPORTED_GRANULARITIES).  Quantize's "backend" names the kernel family the
# granularity runs on (TURBO: the HIP kernels in csrc/kernels/quantization/).
BACKENDS: dict[tuple[str, str | None], tuple[str, ...]] = {
    ("gemm", None): ("HIPBLASLT", "TRITON"),
    ("gemm_fp8", "tensorwise"): ("HIPBLASLT", "CK", "TRITON", "FLYDSL"),
    ("gemm_fp8", "rowwise"): ("CK", "TRITON"),
    ("gemm_fp8", "blockwise"): ("CK", "TRITON"),
    ("gemm_fp8", "mx_blockwise"): ("HIPBLASLT", "TURBO", "FLYDSL"),
    ("grouped_gemm", None): ("CK", "HIPBLASLT", "TRITON"),
    ("grouped_gemm_fp8", "tensorwise"): ("CK", "HIPBLASLT", "TRITON", "FLYDSL"),
    ("grouped_gemm_fp8", "rowwise"): ("CK", "TRITON"),
    ("grouped_gemm_fp8", "blockwise"): ("TRITON",),
    ("quantize", "tensorwise"): ("TURBO",),
    ("quantize", "rowwise"): ("TURBO",),
    ("quantize", "blockwise"): ("TRITON",),
    ("attention", None): ("FLYDSL", "AITER", "HIPKITTENS"),
}

# MX blockwise (MXFP8): Float8QuantConfig(granularity=ScalingGranularity.MX_BLOCKWISE,
# block_size=MXFP8_BLOCK_SIZE, scale_dtype=ScaleDtype.E8M0); any other block size or
# scale dtype fails upstream's __post_init__ assertion.  Runs on gfx950 only.
MX_BLOCK_SIZE = 32

_HIPBLASLT_GEMM = ("csrc/kernels/gemm/hipblaslt_gemm.cu", "csrc/pytorch/gemm/hipblaslt_gemm.cpp")
_CK_GEMM = (
    "csrc/kernels/gemm/ck_gemm.cu",
    "csrc/kernels/gemm/ck/",
    "csrc/pytorch/gemm/ck_gemm.cpp",
)
_CK_GROUPED = (
    "csrc/kernels/grouped_gemm/ck_grouped_gemm.cu",
    "csrc/kernels/grouped_gemm/ck/",
    "csrc/pytorch/grouped_gemm/ck_grouped_gemm.cpp",
)
_HIPBLASLT_GROUPED = (
    "csrc/kernels/grouped_gemm/hipblaslt_grouped_gemm.cu",
    "csrc/pytorch/grouped_gemm/hipblaslt_grouped_gemm.cpp",
)
_QUANT_CPP = "csrc/pytorch/quantization/quantization.cpp"

# (op, backend[, granularity]) -> the files that run: the kernels the backend's
# KernelBackend.execute launches, and the binding between.  A granularity-specific
# entry wins over the op-wide one.
CODE_MAP: dict[tuple[str, ...], tuple[str, ...]] = {
    ("gemm", "HIPBLASLT"): _HIPBLASLT_GEMM,
    ("gemm", "TRITON"): ("primus_turbo/triton/gemm/gemm_kernel.py",),
    ("gemm_fp8", "HIPBLASLT"): _HIPBLASLT_GEMM,
    ("gemm_fp8", "CK"): _CK_GEMM,
    ("gemm_fp8", "TRITON"): ("primus_turbo/triton/gemm/gemm_fp8_kernel.py",),
    ("gemm_fp8", "TURBO"): (
        "csrc/kernels/gemm/turbo_gemm.cu",
        "csrc/kernels/gemm/turbo/turbo_gemm_mxfp8_kernel.h",
        "csrc/pytorch/gemm/turbo_gemm.cpp",
    ),
    ("gemm_fp8", "FLYDSL", "tensorwise"): ("primus_turbo/flydsl/gemm/gemm_fp8_kernel.py",),
    ("gemm_fp8", "FLYDSL", "mx_blockwise"): ("primus_turbo/flydsl/gemm/gemm_mxfp8_kernel.py",),
    ("grouped_gemm", "CK"): _CK_GROUPED,
    ("grouped_gemm", "HIPBLASLT"): _HIPBLASLT_GROUPED,
    ("grouped_gemm", "TRITON"): ("primus_turbo/triton/grouped_gemm/grouped_gemm_kernel.py",),
    ("grouped_gemm_fp8", "CK"): _CK_GROUPED,
    ("grouped_gemm_fp8", "HIPBLASLT"): _HIPBLASLT_GROUPED,
    ("grouped_gemm_fp8", "TRITON"): (
        "primus_turbo/triton/grouped_gemm/grouped_gemm_fp8_kernel.py",
    ),
    ("grouped_gemm_fp8", "FLYDSL"): (
        "primus_turbo/flydsl/grouped_gemm/grouped_gemm_fp8_kernel.py",
    ),
    ("quantize", "TURBO", "tensorwise"): (
        "csrc/kernels/quantization/quantization_tensorwise.cu",
        _QUANT_CPP,
    ),
    ("quantize", "TURBO", "rowwise"): (
        "csrc/kernels/quantization/quantization_rowwise.cu",
        _QUANT_CPP,
    ),
    ("quantize", "TRITON", "blockwise"): ("primus_turbo/triton/quantization/quant_blockwise.py",),
    ("attention", "FLYDSL"): (
        "primus_turbo/flydsl/attention/flash_attn_fwd.py",
        "primus_turbo/flydsl/attention/flash_attn_bwd.py",
        "primus_turbo/pytorch/kernels/attention/attention_flydsl_impl.py",
    ),
    # AITER's kernels live in the aiter package, outside this tree: only the wrapper
    # that calls them can be optimised here.
    ("attention", "AITER"): ("primus_turbo/pytorch/kernels/attention/attention_aiter_impl.py",),
    ("attention", "HIPKITTENS"): (
        "csrc/kernels/attention/hipkittens/",
        "csrc/pytorch/attention/hk_attn.cpp",
        "primus_turbo/pytorch/kernels/attention/attention_hipkittens_impl.py",
    ),
}

# The focused test file per op (tests/pytorch/ops/) and the -k term per granularity.
TEST_FILES = {
    "gemm": "test_gemm.py",
    "gemm_fp8": "test_gemm_fp8.py",
    "grouped_gemm": "test_grouped_gemm.py",
    "grouped_gemm_fp8": "test_grouped_gemm_fp8.py",
    "quantize": "test_quantization.py",
    "attention": "test_attention.py",
}
_GRANULARITY_K = {
    "tensorwise": "tensorwise",
    "rowwise": "rowwise",
    "blockwise": "blockwise and not mx_blockwise",
    "mx_blockwise": "mx_blockwise",
}
# Upstream tests parametrise the backend as a BackendType member (test ids
# "BackendType.CK"); the focused test drops the other backends' cases and keeps the
# backend=None ones, which follow the selector variable set on the command.
_ALL_BACKENDS = ("CK", "HIPBLASLT", "AITER", "TRITON", "TURBO", "FLYDSL", "HIPKITTENS")

# The training benchmarks (benchmark/ops/training/, moved there from benchmark/ops/ in
# June 2026): script, and its --dtype / --granularity flags.  Each writes its CSV to the
# file named by --output (it prints only a table).  Quantisation has no upstream
# training benchmark: its campaigns measure with runner.worker.fullbench.
BENCH_DIR = "benchmark/ops/training"
BENCH_SCRIPTS = {
    "gemm": "bench_gemm_turbo.py",
    "gemm_fp8": "bench_gemm_turbo.py",
    "grouped_gemm": "bench_grouped_gemm_turbo.py",
    "grouped_gemm_fp8": "bench_grouped_gemm_turbo.py",
    "attention": "bench_attention_turbo.py",
}
# our granularity -> the benchmark's --granularity choice
BENCH_GRANULARITY = {
    "tensorwise": "tensorwise",
    "rowwise": "rowwise",
    "blockwise": "blockwise",
    "mx_blockwise": "mxfp8",  # bench_gemm_turbo.py only; the grouped one has no MX
}
BENCH_OUTPUT = f'"${{TURBO_CAMPAIGN_OUT:-.}}/{BENCH_CSV_NAME}"'
# The files of benchmark/ops/training/ every bench_*_turbo.py reads (a6a16cdc): its
# `from config import ...` (models, shapes, references) and the batch sizes config.py
# loads; a workspace copies them beside the script.
BENCH_SUPPORT = ("__init__.py", "config.py", "batch_size_config.json")


def valid_backends(op: str, granularity: str | None) -> tuple[str, ...]:
    """The backends upstream has for ``op`` at ``granularity``; ConfigError otherwise."""
    key = (op, granularity)
    if key not in BACKENDS:
        grans = sorted(str(g) for o, g in BACKENDS if o == op)
        if not grans:
            ops = ", ".join(sorted({o for o, _ in BACKENDS}))
            raise ConfigError(f"Primus-Turbo has no campaign op {op!r}; choose one of: {ops}")
        raise ConfigError(
            f"Primus-Turbo's {op} has no granularity {granularity!r} with an upstream "
            f"benchmark and test; choose one of: {', '.join(grans)}"
        )
    return BACKENDS[key]


def check_backend(op: str, granularity: str | None, backend: str) -> None:
    valid = valid_backends(op, granularity)
    if backend.upper() not in valid:
        what = f"{op} ({granularity})" if granularity else op
        raise ConfigError(
            f"Primus-Turbo's {what} has no backend {backend.upper()} (checked upstream at "
            f"{UPSTREAM_COMMIT[:8]}); choose one of: {', '.join(valid)}"
        )


class PrimusTurboTarget(Target):
    def default_backend(self, op: str, granularity: str | None, gpu: str = "") -> str:
        valid = valid_backends(op, granularity)
        return "TRITON" if "TRITON" in valid else valid[0]

    def check_request(self, op: str, granularity: str | None, backend: str) -> None:
        check_backend(op, granularity, backend)

    def upstream_files(
        self, op: str, granularity: str | None, backend: str
    ) -> dict[str, list[str]]:
        bench = [f"{BENCH_DIR}/{BENCH_SCRIPTS[op]}"] if op in BENCH_SCRIPTS else []
        return {
            "test_command": [f"tests/pytorch/ops/{TEST_FILES[op]}"],
            "benchmark_command": bench,
            "kernel_source": self.kernel_source(op, backend, granularity),
        }

    def test_command(self, op: str, granularity: str | None, backend: str) -> str:
        check_backend(op, granularity, backend)
        b = backend.upper()
        terms = [f"test_quantize_fp8_{granularity}"] if op == "quantize" and granularity else []
        if op != "quantize" and granularity:
            terms.append(_GRANULARITY_K[granularity])
        if op == "attention":
            terms.append("test_attention_16bit")
        terms += [f"not BackendType.{o}" for o in _ALL_BACKENDS if o != b and op != "quantize"]
        env = " ".join(f"{k}={v}" for k, v in self.selector_env(op, backend).items())
        select = f' -k "{" and ".join(terms)}"' if terms else ""
        command = f"python -m pytest tests/pytorch/ops/{TEST_FILES[op]} -q{select}"
        return f"{env} {command}".strip()

    def benchmark_command(self, op: str, granularity: str | None, backend: str) -> str:
        check_backend(op, granularity, backend)
        env = " ".join(f"{k}={v}" for k, v in self.selector_env(op, backend).items())
        if op == "quantize":
            return (
                f"python -m runner.worker.fullbench --target primus-turbo --op quantize "
                f"--granularity {granularity} --backend {backend.upper()} --out {BENCH_OUTPUT}"
            )
        script = f"{BENCH_DIR}/{BENCH_SCRIPTS[op]}"
        if op == "attention":
            args = f" --backend {backend.lower()}"
        elif op.endswith("_fp8"):
            args = f" --dtype fp8 --granularity {BENCH_GRANULARITY[str(granularity)]}"
        else:
            args = " --dtype bf16"
        return f"{env} python {script}{args} --output {BENCH_OUTPUT}".strip()

    def full_suite_command(self) -> str:
        return "pytest tests/pytorch/ -v"

    def for_workspace(self, op: str, granularity: str | None, backend: str) -> Target:
        """Workspace mode carries a Python (Triton) kernel: the stack needs no HIP build
        (runner.store.minimal_stack), so its rounds build nothing.  HIP/CK/hipBLASLt
        kernels are compiled into ``primus_turbo.pytorch._C``: refused, with the way."""
        kernels = self.kernel_source(op, backend, granularity)
        check_workspace_backend(op, granularity, backend, kernels)
        return dataclasses.replace(self, editable_install=False, rebuild_globs=(), build_files=())

    def workspace_scaffolding(
        self, op: str, granularity: str | None, backend: str
    ) -> dict[str, list[str]]:
        """The minimal stack's seeds: the kernel modules, the op that calls them, the
        FP8 configuration, the compiled extension (a stand-in) and the focused test;
        runner.store.minimal_stack follows their imports."""
        kernels = self.kernel_source(op, backend, granularity)
        check_workspace_backend(op, granularity, backend, kernels)
        test = f"tests/pytorch/ops/{TEST_FILES[op]}"
        seeds = [k[: -len(".py")].replace("/", ".") for k in (*kernels, test)]
        seeds += [f"{self.package}.pytorch.ops.{op}", self.api_modules[1], *self.native_modules]
        conftests = ["tests.conftest", "tests.pytorch.conftest", "tests.pytorch.ops.conftest"]
        bench = [f"{BENCH_DIR}/{BENCH_SCRIPTS[op]}"] if op in BENCH_SCRIPTS else []
        return {
            "tests": [],
            "bench": bench,
            # what upstream's training benchmark reads beside it (`from config import`,
            # its batch sizes), copied where the checkout has them
            "bench_optional": [f"{BENCH_DIR}/{f}" for f in BENCH_SUPPORT] if bench else [],
            "stack": seeds,
            "optional": conftests,
        }

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
        """MAX_JOBS, the campaign's GPU_ARCHS, and the switches of upstream's setup.py
        (PRIMUS_TURBO_BUILD_CK, PRIMUS_TURBO_FRAMEWORK) as set where the campaign runs:
        the builds' environment is otherwise clean."""
        env = {"MAX_JOBS": os.environ.get("MAX_JOBS", "64")}
        env |= {k: os.environ[k] for k in (BUILD_CK_ENV, FRAMEWORK_ENV) if k in os.environ}
        if gpu_archs:
            env["GPU_ARCHS"] = gpu_archs
        return env

    def build_facts(self, env: dict[str, str]) -> dict[str, object]:
        return build_facts(env).to_dict()

    def check_build_facts(self, backend: str, gpu: str) -> None:
        env = self.build_env(gpu if gpu.startswith("gfx") else None)
        why = missing_backend(build_facts(env), backend.upper(), gpu)
        if why:
            raise ConfigError(
                f"backend {backend.upper()} is not in this campaign's builds: {why} "
                "(Primus-Turbo's setup.py, checked at a6a16cdc)"
            )

    def check_build(self, root: Path) -> None:
        check_editable_install(root)


# The backends whose kernels are Python files a minimal stack can carry (workspace mode).
STACK_BACKENDS = ("TRITON",)


def check_workspace_backend(
    op: str, granularity: str | None, backend: str, kernels: list[str]
) -> None:
    if backend.upper() in STACK_BACKENDS and all(k.endswith(".py") for k in kernels):
        return
    native = [k for k in kernels if not k.endswith(".py")] or kernels
    raise ConfigError(
        f"workspace mode on Primus-Turbo carries Python (Triton) kernels only: the "
        f"{backend.upper()} kernel of {op}"
        + (f" ({granularity})" if granularity else "")
        + f" ({', '.join(native)}) is compiled by setup.py into primus_turbo.pytorch._C, "
        "and this tool has no minimal stack with its own HIP/CK build of csrc/. Run the "
        "campaign in the full repository instead: campaign init --mode repo (each round "
        "builds it once per build key: GPU_ARCHS=<arch> pip install --no-build-isolation "
        "-e .), or choose --backend TRITON"
    )


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
        "gemm": GEMM_ENV,
        "grouped_gemm": GROUPED_GEMM_ENV,
        "attention": ATTN_ENV,
    },
    code_map=CODE_MAP,
    # The build files at the root of a6a16cdc: setup.py (the CUDAExtension) and
    # pyproject.toml (build requirements); upstream has no CMakeLists.txt.  The
    # install reads requirements.txt (install_commands, the seed protocol's
    # `pip install -r requirements.txt`): the packages a build compiles against.
    rebuild_globs=("csrc/**", "setup.py", "pyproject.toml", "requirements.txt"),
    build_files=("setup.py", "pyproject.toml"),
    editable_install=True,
    native_modules=("primus_turbo.pytorch._C",),  # setup.py's CUDAExtension (a6a16cdc)
)
