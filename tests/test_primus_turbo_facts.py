"""The primus-turbo target against a checkout laid out like upstream.

``tests/data/primus_turbo_paths.txt`` lists upstream paths of AMD-AGI/Primus-Turbo
checked at commit a6a16cdc; the fixture makes a git repository with an empty file at
each (no upstream code), and ``campaign init`` must name only files that exist there.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from runner.cli import main
from runner.core.csv_io import read_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import ConfigError
from runner.flow.new_campaign import CampaignFields, create_campaign
from runner.store.campaign import Campaign
from runner.store.manifest import load_manifest
from runner.targets.primus_turbo import (
    ATTN_ENV,
    BACKENDS,
    GEMM_ENV,
    GROUPED_GEMM_ENV,
    PRIMUS_TURBO,
)
from runner.targets.upstream_csv import to_pinned

pytestmark = pytest.mark.integration  # real git repositories

PATHS = Path(__file__).parent / "data" / "primus_turbo_paths.txt"
IDENT = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
SELECTORS = {GEMM_ENV, GROUPED_GEMM_ENV, ATTN_ENV}


def upstream_paths() -> list[str]:
    lines = PATHS.read_text(encoding="utf-8").splitlines()
    return [ln for ln in lines if ln and not ln.startswith("#")]


def make_checkout(path: Path, leave_out: tuple[str, ...] = ()) -> Path:
    for rel in upstream_paths():
        if rel not in leave_out:
            (path / rel).parent.mkdir(parents=True, exist_ok=True)
            (path / rel).write_text("")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), *IDENT, "commit", "-qm", "layout"], check=True)
    return path


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkout(tmp_path_factory.mktemp("pt") / "Primus-Turbo")


CASES = [(op, gran, b) for (op, gran), backends in BACKENDS.items() for b in backends]


def primus_campaign(root: Path, source: Path, target_op: str, **fields: Any) -> Campaign:
    """A Primus-Turbo campaign on ``source`` created under ``root`` (local executor)."""
    given = CampaignFields(
        target="primus-turbo", executor="local", source=str(source), target_op=target_op, **fields
    )
    return create_campaign(root, given)


def files_named(command: str) -> list[str]:
    """Paths a command names: ``.py`` arguments and pytest's file argument."""
    return [w for w in shlex.split(command) if w.endswith(".py") and not w.startswith("-")]


@pytest.mark.parametrize(("op", "gran", "backend"), CASES)
def test_init_names_only_upstream_files_and_variables(
    tmp_path: Path, checkout: Path, op: str, gran: str | None, backend: str
) -> None:
    campaign = primus_campaign(
        tmp_path, checkout, op, granularity=gran, target_backend=backend, target_gpu="gfx942"
    )
    m = campaign.manifest
    for command in (m.test_command, m.benchmark_command):
        for name in files_named(command):
            assert (checkout / name).is_file(), f"{command} names {name}"
        for var in re.findall(r"\bPRIMUS_TURBO_\w+", command):
            assert var in SELECTORS, command
    assert m.kernel_source and all((checkout / k).exists() for k in m.kernel_source)
    if op == "quantize":  # upstream has no training benchmark for it
        assert m.benchmark_command.startswith(
            "python -m runner.worker.fullbench --target primus-turbo"
        )
        assert "PRIMUS_TURBO_" not in m.test_command + m.benchmark_command
    else:
        assert "benchmark/ops/training/bench_" in m.benchmark_command
        assert "--output" in m.benchmark_command
        ((var, value),) = PRIMUS_TURBO.selector_env(op, backend).items()
        assert f"{var}={value}" in m.benchmark_command
        assert var == (ATTN_ENV if op == "attention" else var)


def test_attention_uses_the_variable_upstream_reads(tmp_path: Path, checkout: Path) -> None:
    m = primus_campaign(
        tmp_path, checkout, "attention", target_backend="AITER", target_gpu="gfx942"
    ).manifest
    assert "PRIMUS_TURBO_ATTN_BACKEND=AITER" in m.benchmark_command
    assert "PRIMUS_TURBO_ATTENTION_BACKEND" not in m.benchmark_command + m.test_command
    assert "--backend aiter" in m.benchmark_command
    assert m.kernel_source == ["primus_turbo/pytorch/kernels/attention/attention_aiter_impl.py"]


def test_gemm_fp8_blockwise_commands(tmp_path: Path, checkout: Path) -> None:
    m = primus_campaign(
        tmp_path,
        checkout,
        "gemm_fp8",
        granularity="blockwise",
        target_backend="CK",
        target_gpu="gfx942",
    ).manifest
    assert m.test_command.startswith(
        "PRIMUS_TURBO_GEMM_BACKEND=CK python -m pytest tests/pytorch/ops/test_gemm_fp8.py -q "
        '-k "blockwise and not mx_blockwise and not BackendType.HIPBLASLT'
    )
    assert m.benchmark_command == (
        "PRIMUS_TURBO_GEMM_BACKEND=CK python benchmark/ops/training/bench_gemm_turbo.py "
        '--dtype fp8 --granularity blockwise --output "${TURBO_CAMPAIGN_OUT:-.}/'
        'upstream_benchmark.csv"'
    )
    assert "csrc/kernels/gemm/ck_gemm.cu" in m.kernel_source


def test_mx_blockwise_uses_the_benchmarks_mxfp8_choice(tmp_path: Path, checkout: Path) -> None:
    m = primus_campaign(
        tmp_path,
        checkout,
        "gemm_fp8",
        granularity="mx_blockwise",
        target_backend="TURBO",
        target_gpu="gfx950",
    ).manifest
    assert "--granularity mxfp8" in m.benchmark_command
    assert m.kernel_source[0] == "csrc/kernels/gemm/turbo_gemm.cu"


def test_build_files_are_the_ones_at_upstreams_root(checkout: Path) -> None:
    """At a6a16cdc the build is setup.py (the CUDAExtension) with pyproject.toml beside
    it; there is no CMakeLists.txt.  A change to either declared build file rebuilds,
    and each one exists in a checkout laid out like upstream."""
    assert PRIMUS_TURBO.build_files == ("setup.py", "pyproject.toml")
    assert "CMakeLists.txt" not in upstream_paths()
    assert "CMakeLists.txt" not in PRIMUS_TURBO.rebuild_globs
    for name in PRIMUS_TURBO.build_files:
        assert (checkout / name).is_file(), name
        assert PRIMUS_TURBO.needs_rebuild([name]), name
    assert PRIMUS_TURBO.needs_rebuild(["csrc/kernels/gemm/ck_gemm.cu"])
    assert not PRIMUS_TURBO.needs_rebuild(["primus_turbo/triton/gemm/gemm_kernel.py"])


def invoke(capsys: pytest.CaptureFixture[str], root: Path, *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(
            [
                "--campaigns-root",
                str(root),
                "init",
                "--target",
                "primus-turbo",
                "--executor",
                "local",
                *args,
            ]
        )
    return int(info.value.code or 0), capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "valid"),
    [
        (("--op", "gemm", "--backend", "CK"), "HIPBLASLT, TRITON"),
        (("--op", "gemm_fp8", "--granularity", "rowwise", "--backend", "HIPBLASLT"), "CK, TRITON"),
        (("--op", "attention", "--backend", "TRITON"), "FLYDSL, AITER, HIPKITTENS"),
        (("--op", "grouped_gemm_fp8", "--granularity", "blockwise", "--backend", "CK"), "TRITON"),
    ],
)
def test_init_refuses_a_backend_the_op_does_not_have(
    tmp_path: Path,
    checkout: Path,
    capsys: pytest.CaptureFixture[str],
    args: tuple[str, ...],
    valid: str,
) -> None:
    rc, err = invoke(capsys, tmp_path / "c", *args, "--source", str(checkout))
    assert rc == 2
    assert f"choose one of: {valid}" in err
    assert not (tmp_path / "c").exists() or not any((tmp_path / "c").iterdir())


def test_quantize_defaults_to_the_kernel_its_granularity_runs(
    tmp_path: Path, checkout: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _ = invoke(
        capsys,
        tmp_path / "c",
        "--op",
        "quantize",
        "--granularity",
        "rowwise",
        "--gpu",
        "gfx942",
        "--source",
        str(checkout),
    )
    assert rc == 0
    (manifest,) = (tmp_path / "c").glob("*/manifest.yaml")
    m = load_manifest(manifest)
    assert (m.target_backend, m.csv_schema) == ("TURBO", "memory")
    assert m.kernel_source[0] == "csrc/kernels/quantization/quantization_rowwise.cu"


def test_a_missing_benchmark_script_is_an_error_naming_where_it_looked(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    script = "benchmark/ops/training/bench_gemm_turbo.py"
    old = make_checkout(tmp_path / "old", leave_out=(script,))
    rc, err = invoke(
        capsys, tmp_path / "c", "--op", "gemm", "--backend", "TRITON", "--source", str(old)
    )
    assert rc == 2
    assert f"not found\n  {old.resolve() / script}" in err
    # a benchmark command the user gives is theirs: not checked against the layout
    m = primus_campaign(
        tmp_path / "d", old, "gemm", target_backend="TRITON", benchmark_command="python my_bench.py"
    ).manifest
    assert m.benchmark_command == "python my_bench.py"


# ---- the upstream benchmark's CSV ------------------------------------------------------
# Rows written by hand in the format of bench_gemm_turbo.py --dtype fp8 --output (the
# column order of upstream's writer at a6a16cdc); the values are made up.
UPSTREAM_GEMM_FP8 = """\
TestID,Platform,GPU,Case,MBS,M,N,K,Dtype,Granularity,Check,Forward Time (ms),\
Forward TFLOPS,Backward Time (ms),Backward TFLOPS
1,ROCm,MI300X,Llama-2-7B,1,4096,4096,4096,fp8,blockwise,PASS,0.31,443.35,0.65,422.84
2,ROCm,MI300X,Llama-2-7B,1,4096,11008,4096,fp8,blockwise,FAIL,0.80,461.70,1.70,434.55
3,ROCm,MI300X,Llama-2-70B,1,4096,28672,8192,fp8,blockwise,ERROR,ERROR,0.00,ERROR,0.00
"""


def test_upstream_csv_maps_onto_the_pinned_schema(tmp_path: Path) -> None:
    text, skipped = to_pinned(UPSTREAM_GEMM_FP8, "gemm")
    assert skipped == 0
    path = tmp_path / "full.csv"
    path.write_text(text, encoding="utf-8")
    csv = read_csv(path, GEMM_SCHEMA)
    assert [r.values["Check"] for r in csv.rows] == ["PASS", "FAIL", "ERROR"]
    first = csv.rows[0]
    assert first.label == "1-Llama-2-7B-MBS1-4096x4096x4096"
    assert first.number("Forward TFLOPS") == 443.35
    assert first.number("Backward Time (ms)") == 0.65
    assert csv.rows[2].values["Forward Time (ms)"] == "nan"


def test_upstream_csv_with_other_columns_is_refused() -> None:
    with pytest.raises(ConfigError, match="lacks"):
        to_pinned("TestID,Case,M\n1,x,2\n", "gemm")


# ---- MX blockwise config and quantize's benchmark ---------------------------------------
def test_mx_blockwise_config_has_block_32_and_e8m0_scales() -> None:
    """A stand-in config with upstream's two MX checks (block 32, E8M0 scales)."""
    import dataclasses
    import enum

    from turbo_kernels.pytorch.core import low_precision as lp

    from runner.targets.base import TargetAPI
    from runner.worker.ops.gemm import Fp8GemmOp

    class ScaleDtype(enum.Enum):
        FP32 = enum.auto()
        E8M0 = enum.auto()

    @dataclasses.dataclass
    class Config:
        format: object
        granularity: object
        block_size: int | None = None
        scale_dtype: ScaleDtype = ScaleDtype.FP32

        def __post_init__(self) -> None:
            if self.granularity is lp.ScalingGranularity.MX_BLOCKWISE:
                assert self.block_size == 32 and self.scale_dtype is ScaleDtype.E8M0

    api = TargetAPI(None, lp.Format, lp.ScalingGranularity, Config, ScaleDtype)
    op = Fp8GemmOp(api, {"granularity": "mx_blockwise"})
    assert (op.config.block_size, op.config.scale_dtype) == (32, ScaleDtype.E8M0)
    example = TargetAPI(None, lp.Format, lp.ScalingGranularity, lp.Float8QuantConfig)
    assert Fp8GemmOp(example, {"granularity": "mx_blockwise"}).config.block_size == 32


def test_fullbench_measures_the_named_target() -> None:
    import argparse

    from runner.worker.fullbench import build_spec

    args = argparse.Namespace(
        op="quantize",
        granularity="rowwise",
        backend="TURBO",
        shape_set=None,
        shapes=None,
        budget_s=1.0,
        cache_mode="hot",
        target="primus-turbo",
    )
    spec = build_spec(args, "cpu")
    assert (spec.target, spec.op, spec.options["granularity"]) == (
        "primus-turbo",
        "quantize",
        "rowwise",
    )


BENCH_SCRIPT = """\
import os, sys
rows = open(sys.argv[1]).read()
out = os.path.join(os.environ.get("TURBO_CAMPAIGN_OUT", "."), "upstream_benchmark.csv")
open(out, "w").write(rows)
print("+------+ a table, not CSV +------+")
print("Results saved to", out)
"""


def test_accept_reads_the_csv_the_benchmark_writes(tmp_path: Path) -> None:
    """The full benchmark's CSV comes from the file the script writes (its --output),
    through a real worker job, and lands in the pinned schema next to the raw file."""
    from runner.executors.local import LocalExecutor
    from runner.flow import accept
    from runner.flow.new_campaign import fresh_example_copy
    from runner.round.context import RoundPlan

    source = fresh_example_copy(tmp_path / "src")
    sample = tmp_path / "sample.csv"
    sample.write_text(UPSTREAM_GEMM_FP8, encoding="utf-8")
    script = tmp_path / "bench_like_upstream.py"
    script.write_text(BENCH_SCRIPT, encoding="utf-8")
    command = f"python {script} {sample}"
    campaign = create_campaign(
        tmp_path / "campaigns",
        CampaignFields(
            source=str(source), target_op="gemm", target_gpu="cpu", benchmark_command=command
        ),
    )
    art = tmp_path / "art"
    art.mkdir()
    rnd = RoundPlan(campaign, LocalExecutor(), print, tmp_path / "tmp", 0, "full")
    info = accept._command_full_benchmark(rnd, source, command, art / "full_benchmark.csv")
    assert info["returncode"] == 0 and info["csv"] == "full_benchmark.csv"
    assert (art / "upstream_benchmark.csv").read_text() == UPSTREAM_GEMM_FP8
    assert info["fail"] == 2  # the FAIL and the ERROR row
    rows = read_csv(art / "full_benchmark.csv", GEMM_SCHEMA).rows
    assert rows[0].label == "1-Llama-2-7B-MBS1-4096x4096x4096"
    check = accept.benchmark_check(info)
    assert not check.ok and "2 row(s) FAIL or ERROR" in check.detail
