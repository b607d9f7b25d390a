"""docs/protocol.md §2.1: the manifest speaks upstream's names.

The skill page of Primus-Turbo's ``agent/skills/kernel-optimize/`` (checked at a6a16cdc) writes a
``manifest.yaml`` whose ``target_op`` is op + granularity (``gemm_fp8_blockwise``), with
``project_skill``, ``execution_mode`` (``repo``/``workspace``), ``max_iterations`` below
120 and ``performance_target`` in TFLOPS, GB/s or a share of peak.  A campaign manifest
reads those spellings; ``campaign init --from-manifest FILE`` imports upstream's file;
unknown fields are named.  Old manifests still load.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import test_primus_turbo_facts as ptf
import yaml
from campaign_helpers import MANIFEST

from runner.cli import main
from runner.core.errors import ConfigError
from runner.store.manifest import (
    load_manifest,
    manifest_yaml,
    parse_performance_target,
    save_manifest,
    validate_manifest,
)


def fields(**over: Any) -> dict[str, Any]:
    """An old-style manifest: op and granularity apart, no project_skill."""
    fp8 = {"target_op": "gemm_fp8", "granularity": "blockwise", "target_gpu": "gfx942"}
    return MANIFEST | fp8 | {"shape_set": "models"} | over


# The skill page's Step 3 template filled as its End-to-End example fills it (a6a16cdc).
UPSTREAM_MANIFEST: dict[str, Any] = {
    "target_op": "gemm_fp8_blockwise",
    "target_backend": "TRITON",
    "target_lang": "TRITON",
    "target_gpu": "gfx942",
    "execution_mode": "repo",
    "project_skill": "primus-turbo-develop",
    "performance_target": "80% of peak",
    "primary_metric": "Combined Step TFLOPS",
    "target_shapes": "all",
    "kernel_source": "primus_turbo/triton/gemm/gemm_fp8_kernel.py",
    "test_command": 'pytest tests/pytorch/ops/test_gemm_fp8.py -v -k "blockwise and TRITON"',
    "benchmark_command": "PRIMUS_TURBO_GEMM_BACKEND=TRITON python "
    "benchmark/ops/training/bench_gemm_turbo.py --dtype fp8 --granularity blockwise",
    "quick_command": "python agent/workspace/x/quick_test_bench.py",
    "representative_shapes": None,
    "git_commit": True,
    "git_branch": "auto",
    "max_iterations": 10,
    "created": "2026-04-12 09:30",
}


def test_the_template_names_every_field_the_import_knows() -> None:
    from runner.store.manifest import SECTION2_FIELDS

    assert list(UPSTREAM_MANIFEST) == list(SECTION2_FIELDS)


def test_upstream_spellings_load_and_are_written_back(tmp_path: Path) -> None:
    data = fields(
        target_op="gemm_fp8_blockwise",
        execution_mode="workspace-mode",
        project_skill="primus-turbo-develop",
        performance_target="80% of peak",
        kernel_source="primus_turbo/triton/gemm/gemm_fp8_kernel.py",
        max_iterations=119,
    )
    del data["granularity"]
    m = validate_manifest(data, "t")
    assert (m.target_op, m.granularity, m.upstream_op) == (
        "gemm_fp8",
        "blockwise",
        "gemm_fp8_blockwise",
    )
    assert (m.execution_mode, m.project_skill) == ("workspace", "primus-turbo-develop")
    assert m.kernel_source == ["primus_turbo/triton/gemm/gemm_fp8_kernel.py"]
    written = yaml.safe_load(manifest_yaml(m))
    assert written["target_op"] == "gemm_fp8_blockwise"
    assert written["project_skill"] == "primus-turbo-develop"
    path = tmp_path / "manifest.yaml"
    save_manifest(path, m)
    assert load_manifest(path) == m
    mx = validate_manifest(fields(target_op="gemm_fp8_mx_blockwise", granularity=None), "t")
    assert (mx.target_op, mx.granularity) == ("gemm_fp8", "mx_blockwise")


def test_an_old_manifest_still_loads_and_bad_values_are_named(tmp_path: Path) -> None:
    old = validate_manifest(fields(), "t")  # target_op gemm_fp8 + granularity, no skill
    assert (old.target_op, old.upstream_op, old.project_skill) == (
        "gemm_fp8",
        "gemm_fp8_blockwise",
        None,
    )
    with pytest.raises(ConfigError, match="names the granularity 'blockwise' but"):
        validate_manifest(fields(target_op="gemm_fp8_blockwise", granularity="rowwise"), "t")
    with pytest.raises(ConfigError, match="max_iterations = 120"):
        validate_manifest(fields(max_iterations=120), "t")
    with pytest.raises(ConfigError, match="target_opp = 'x': unknown field"):
        validate_manifest(fields(target_opp="x"), "t")


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("80% of peak", (">=", 80.0, "% of peak")),
        (">60% peak efficiency", (">", 60.0, "% of peak")),
        (">= 75 % of peak", (">=", 75.0, "% of peak")),
        (">500 TFLOPS", (">", 500.0, "TFLOPS")),
        ("3000 GB/s", (">=", 3000.0, "GB/s")),
    ],
)
def test_performance_target_as_a_share_of_peak(text: str, parsed: tuple[str, float, str]) -> None:
    assert parse_performance_target(text) == parsed
    if "GB/s" not in text:
        assert validate_manifest(fields(performance_target=text), "t").performance_target == text
    with pytest.raises(ValueError, match=r"share of peak lies in \(0, 100\]"):
        parse_performance_target("150% of peak")


def test_t1_reads_a_share_of_peak() -> None:
    from test_records import BASE, rr

    from runner.core.outcomes import Status
    from runner.render.markdown import render_termination_check

    m = validate_manifest(fields(performance_target="80% of peak"), "t")
    results = [rr(1, Status.BASELINE, BASE)]
    met = render_termination_check(m, results, peak_fraction=0.85)
    assert "T1 performance target (80% of peak): MET — best 85.0% of peak" in met
    assert "NOT MET — best 70.0% of peak" in render_termination_check(m, results, peak_fraction=0.7)
    assert "unknown (no peak figure)" in render_termination_check(m, results)


def write_upstream(tmp_path: Path, **over: Any) -> Path:
    path = tmp_path / "upstream_manifest.yaml"
    path.write_text(yaml.safe_dump(UPSTREAM_MANIFEST | over, sort_keys=False))
    return path


def test_an_upstream_manifest_is_read_and_unknown_fields_named(tmp_path: Path) -> None:
    from runner.store.upstream_manifest import read_upstream_manifest

    got = read_upstream_manifest(write_upstream(tmp_path))
    assert (got["target_op"], got["granularity"]) == ("gemm_fp8", "blockwise")
    assert "quick_command" not in got and "representative_shapes" not in got
    assert got["kernel_source"] == ["primus_turbo/triton/gemm/gemm_fp8_kernel.py"]
    with pytest.raises(
        ConfigError, match=re.escape("unknown field(s) notes, target_opp; remove them")
    ):
        read_upstream_manifest(write_upstream(tmp_path, target_opp="x", notes="y"))
    with pytest.raises(ConfigError, match="target_gpu still hold the template's <placeholder>"):
        read_upstream_manifest(write_upstream(tmp_path, target_gpu="<target_gpu>"))


@pytest.mark.integration  # a real git checkout
def test_init_from_an_upstream_manifest(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = ptf.make_checkout(tmp_path / "Primus-Turbo")
    root = tmp_path / "campaigns"
    argv = [
        "--campaigns-root",
        str(root),
        "init",
        "--source",
        str(checkout),
        "--executor",
        "local",
        "--from-manifest",
        str(write_upstream(tmp_path)),
        "--max-iterations",
        "7",
    ]
    with pytest.raises(SystemExit) as info:
        main(argv)
    out, err = capsys.readouterr()
    assert info.value.code == 0, err
    made = next(line for line in out.splitlines() if line.startswith("campaign: "))
    m = load_manifest(Path(made.removeprefix("campaign: ").strip()) / "manifest.yaml")
    assert (m.target, m.target_op, m.granularity, m.target_backend, m.target_gpu) == (
        "primus-turbo",
        "gemm_fp8",
        "blockwise",
        "TRITON",
        "gfx942",
    )
    assert (m.project_skill, m.performance_target) == ("primus-turbo-develop", "80% of peak")
    assert m.max_iterations == 7  # the command line wins
    assert m.test_command == UPSTREAM_MANIFEST["test_command"]
    assert m.created == "2026-04-12 09:30"
    assert m.campaign_name == "gemm_fp8_blockwise_triton_gfx942_20260412"


def test_the_lineage_commit_names_the_op_as_upstream_does(tmp_path: Path) -> None:
    """optimize-loop.md's Git Integration example (a6a16cdc): ``[optimize]
    gemm_fp8_blockwise TRITON round-3: ...``."""
    from runner.core.csv_io import write_csv
    from runner.core.csv_schema import GEMM_SCHEMA
    from runner.judge.json_contract import gate_csvs
    from runner.render.summary import commit_message

    def row(fwd: float) -> dict[str, object]:
        ms = 2 * 4096**3 / (fwd * 1e9)
        return {
            "label": "a",
            "B": 1,
            "M": 4096,
            "N": 4096,
            "K": 4096,
            "Check": "PASS",
            "Forward TFLOPS": fwd,
            "Forward TFLOPS_stddev": 0.0,
            "Backward TFLOPS": fwd,
            "Backward TFLOPS_stddev": 0.0,
            "Forward Time (ms)": ms,
            "Backward Time (ms)": 2 * ms,
            "out_snr": 40.0,
            "da_snr": 40.0,
            "db_snr": 40.0,
        }

    for name, fwd in (("best.csv", 301.0), ("cand.csv", 319.0)):
        write_csv(tmp_path / name, GEMM_SCHEMA, [row(fwd)])
    gate = gate_csvs(str(tmp_path / "best.csv"), str(tmp_path / "cand.csv"))
    m = validate_manifest(
        fields(target_backend="TRITON", quick_command="python /c/x/quick_test_bench.py"), "t"
    )
    message = commit_message(m, 3, "increase num_stages from 2 to 3", gate)
    assert message.startswith(
        "[optimize] gemm_fp8_blockwise TRITON round-3: increase num_stages from 2 to 3\n\n"
    )
