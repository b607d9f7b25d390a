"""A Primus-Turbo campaign whose target shapes are upstream's own benchmark rows.

``upstream_bench_csv`` writes a CSV as Primus-Turbo's
``benchmark/ops/training/bench_gemm_turbo.py`` does at a6a16cdc: a pandas frame of its
row dicts, ``to_csv(index=False)`` (minimal quoting, ``os.linesep`` line ends: LF on
Linux, CRLF on Windows), columns TestID, Platform, GPU, Case, MBS, M, N, K, Dtype,
Granularity (FP8 only), Check, the times and TFLOPS as ``%.2f`` text, ``ERROR`` times
on a failed case.  The campaign is made by ``campaign init --target primus-turbo``.
"""

from __future__ import annotations

import csv
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.compare.shapes import all_shapes
from runner.core.csv_io import read_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import ConfigError, MeasurementFailed, TargetsMissing
from runner.core.shapes import Shape, expand_selectors, shape_set, shapes_by_label
from runner.core.upstream_shapes import UpstreamRow, upstream_rows
from runner.judge.memory_fit import unfit_shapes
from runner.judge.scoring import score
from runner.measure.upstream_pass import kept_names, score_upstream_pass
from runner.store.campaign import Campaign
from runner.targets.upstream_csv import BENCH_CSV_NAME, to_pinned, upstream_targets

pytestmark = pytest.mark.integration  # real git repositories

DATA = Path(__file__).parent / "data"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
FOUR = "Llama-2-7B|Llama-3.1-8B:qkv|attn_out:1"  # four rows at MBS 1


def upstream_bench_csv(rows: Sequence[UpstreamRow], path: Path, newline: str = "\n") -> Path:
    """``rows`` as bench_gemm_turbo.py --dtype fp8 --granularity blockwise writes them on
    an H200 (the case of TestID 3 failed: upstream's ERROR row)."""
    header = [
        "TestID",
        "Platform",
        "GPU",
        "Case",
        "MBS",
        "M",
        "N",
        "K",
        "Dtype",
        "Granularity",
        "Check",
        "Forward Time (ms)",
        "Forward TFLOPS",
        "Backward Time (ms)",
        "Backward TFLOPS",
    ]
    with path.open("w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, lineterminator=newline)
        writer.writerow(header)
        for r in rows:
            ms = 2.0 * r.m * r.n * r.k / 400e12 * 1e3  # 400 TFLOPS forward, 380 backward
            results = ["PASS", f"{ms:.2f}", "400.00", f"{2 * ms * 400 / 380:.2f}", "380.00"]
            if r.test_id == 3:
                results = ["ERROR", "ERROR", "0.00", "ERROR", "0.00"]
            writer.writerow(
                [
                    r.test_id,
                    "CUDA",
                    "H200",
                    r.case,
                    r.mbs,
                    r.m,
                    r.n,
                    r.k,
                    "fp8",
                    "blockwise",
                    *results,
                ]
            )
    return path


def init_primus(tmp_path: Path, *extra: str) -> Campaign:
    """``campaign init --target primus-turbo`` on a Triton stack laid out like upstream."""
    repo = tmp_path / "Primus-Turbo"
    shutil.copytree(DATA / "pt_triton_stack", repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "stack"], check=True)
    args = [
        "--campaigns-root",
        str(tmp_path / "c"),
        "init",
        "--target",
        "primus-turbo",
        "--source",
        str(repo),
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--backend",
        "triton",
        "--gpu",
        "sm90",
        "--executor",
        "local",
        "--name",
        "up",
        *extra,
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    return Campaign.load(tmp_path / "c" / "up")


# ---- upstream's rows as data --------------------------------------------------------------
def test_the_upstream_set_is_bench_gemm_turbos_rows() -> None:
    rows = upstream_rows()  # a GPU outside upstream's batch-size table: H100, H200
    assert len(rows) == 9 * 3 * 5 and [r.test_id for r in rows] == list(range(1, 136))
    first = rows[0]
    got = (first.case, first.gemm, first.mbs, first.m, first.n, first.k)
    assert got == ("Llama-2-7B", "qkv", 1, 4096, 12288, 4096)  # N = (32 + 2 * 32) * 128
    lm_head = [r for r in rows if r.case == "Llama-3.1-8B" and r.gemm == "lm_head"]
    assert [(r.mbs, r.m, r.n, r.k) for r in lm_head] == [
        (1, 8192, 128256, 4096),
        (2, 16384, 128256, 4096),
        (4, 32768, 128256, 4096),
    ]
    mi355 = {r.mbs for r in upstream_rows("MI35*", "fp8") if r.case == "Llama-2-7B"}
    assert mi355 == {1, 2, 4, 12}  # batch_size_config.json's MI35* entry joins the default
    assert [s.label for s in shape_set("upstream")] == [r.label for r in rows]


def test_selectors_and_plain_dims_pick_target_shapes() -> None:
    labels = expand_selectors("upstream", [FOUR, "8192x8192x8192"])
    assert labels == [
        "Llama-2-7B-qkv-MBS1-4096x12288x4096",
        "Llama-2-7B-attn_out-MBS1-4096x4096x4096",
        "Llama-3.1-8B-qkv-MBS1-8192x6144x4096",
        "Llama-3.1-8B-attn_out-MBS1-8192x4096x4096",
        "8192x8192x8192",
    ]
    plain = shapes_by_label("upstream", labels)[-1]
    assert (plain.m, plain.n, plain.k, plain.params) == (8192, 8192, 8192, {})
    assert len(expand_selectors("upstream", ["*:lm_head:*"])) == 27
    with pytest.raises(ConfigError, match="picks none of upstream's rows"):
        expand_selectors("upstream", ["Llama-9:*:1"])
    with pytest.raises(ConfigError, match="needs --shape-set"):
        expand_selectors("cpu", [FOUR])


# ---- init + upstream's CSV: every target found ---------------------------------------------
@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_upstreams_csv_scores_every_target_of_an_upstream_campaign(
    tmp_path: Path, newline: str
) -> None:
    campaign = init_primus(tmp_path, "--shape-set", "upstream")
    targets = all_shapes(campaign.manifest)
    unfit = unfit_shapes("gemm_fp8", shape_set("upstream"), "sm90")  # a pair cannot hold
    assert len(targets) == 135 - campaign.manifest.heldout_count - len(unfit) > 100
    raw = upstream_bench_csv(upstream_rows(), tmp_path / "bench.csv", newline)
    text, left_out = to_pinned(raw.read_text(encoding="utf-8"), "gemm", targets)
    assert left_out == 135 - len(targets)
    pinned = tmp_path / "pinned.csv"
    pinned.write_text(text, encoding="utf-8")
    rows = read_csv(pinned, GEMM_SCHEMA).rows
    assert [r.label for r in rows] == [s.label for s in targets]  # every target found
    assert {int(r.values["B"]) for r in rows} == {1}  # MBS is in M, never a group count
    scored = score(read_csv(pinned, GEMM_SCHEMA), campaign.manifest.primary_metric)
    failed = [
        s.label
        for s in targets
        if s.params["case"] == "Llama-2-7B"
        and s.params["gemm"] == "gate_up"
        and s.params["mbs"] == 1
    ]
    assert scored.n_fail == len(failed)  # TestID 3 is upstream's ERROR row


def test_a_handful_of_upstream_rows_scored_from_the_whole_csv(tmp_path: Path) -> None:
    campaign = init_primus(tmp_path, "--shape-set", "upstream", "--shapes", FOUR)
    targets = all_shapes(campaign.manifest)
    assert [(s.params["case"], s.params["gemm"]) for s in targets] == [
        ("Llama-2-7B", "qkv"),
        ("Llama-2-7B", "attn_out"),
        ("Llama-3.1-8B", "qkv"),
        ("Llama-3.1-8B", "attn_out"),
    ]
    raw = upstream_bench_csv(upstream_rows(), tmp_path / "bench.csv")
    text, left_out = to_pinned(raw.read_text(encoding="utf-8"), "gemm", targets)
    assert left_out == 135 - 4
    labels = [line.split(",")[0] for line in text.splitlines()[1:]]
    assert labels == [s.label for s in targets]


def test_mistral_and_llama_share_dims_but_match_their_own_case() -> None:
    """Llama-2-7B's and Mistral-7B's attention out are both 4096x4096x4096: a target
    from an upstream set matches its own Case's row, a plain MxNxK one the first row."""
    rows = upstream_rows()
    header = [
        "TestID",
        "Case",
        "MBS",
        "M",
        "N",
        "K",
        "Check",
        "Forward Time (ms)",
        "Forward TFLOPS",
        "Backward Time (ms)",
        "Backward TFLOPS",
    ]
    text = ",".join(header) + "\n"
    for r in rows:
        tflops = "500.00" if r.case == "Mistral-7B" else "400.00"
        text += f"{r.test_id},{r.case},{r.mbs},{r.m},{r.n},{r.k},PASS,1.00,{tflops},2.00,1.00\n"
    mistral = shapes_by_label("upstream", ["Mistral-7B-attn_out-MBS1-4096x4096x4096"])
    plain = [Shape("4096x4096x4096", 4096, 4096, 4096)]
    assert to_pinned(text, "gemm", mistral)[0].splitlines()[1].split(",")[6] == "500.00"
    assert to_pinned(text, "gemm", plain)[0].splitlines()[1].split(",")[6] == "400.00"


# ---- a pass that misses its targets: named, and its files kept -------------------------------
def test_missing_targets_are_named_each(tmp_path: Path) -> None:
    targets = shapes_by_label("upstream", [*expand_selectors("upstream", [FOUR]), "8192x8192x8192"])
    only_llama2 = [r for r in upstream_rows() if r.case == "Llama-2-7B"]
    raw = upstream_bench_csv(only_llama2, tmp_path / "bench.csv")
    with pytest.raises(TargetsMissing) as info:
        to_pinned(raw.read_text(encoding="utf-8"), "gemm", targets)
    missing = [
        "Llama-3.1-8B-qkv-MBS1-8192x6144x4096",
        "Llama-3.1-8B-attn_out-MBS1-8192x4096x4096",
        "8192x8192x8192",
    ]
    assert info.value.missing == missing
    assert all(label in str(info.value) for label in missing)
    assert "3 of the 5 target shapes" in str(info.value)


def test_a_pass_that_finds_no_target_keeps_its_csv_and_log(tmp_path: Path) -> None:
    targets = shapes_by_label("upstream", expand_selectors("upstream", [FOUR]))
    out, keep = tmp_path / "out", tmp_path / "rounds" / "round-1"
    out.mkdir()
    upstream_bench_csv([r for r in upstream_rows() if r.case == "Qwen2.5-7B"], out / BENCH_CSV_NAME)
    log = out / "job.log"
    log.write_text("TestID: 1, Case: Qwen2.5-7B, MBS: 1\nResults saved to x.csv\n")
    with pytest.raises(MeasurementFailed) as info:
        score_upstream_pass(out, log, keep, "pass-1-baseline", targets)
    assert all(s.label in str(info.value) for s in targets)
    kept_csv, kept_log = (keep / n for n in kept_names("pass-1-baseline"))
    assert kept_csv.read_bytes() == (out / BENCH_CSV_NAME).read_bytes()
    assert kept_log.read_text() == log.read_text() and info.value.log_path == kept_log
    assert "Results saved to x.csv" in info.value.tail


def test_a_benchmark_that_writes_no_csv_fails_naming_the_targets(tmp_path: Path) -> None:
    targets = shapes_by_label("upstream", expand_selectors("upstream", [FOUR]))
    out, keep = tmp_path / "out", tmp_path / "rounds" / "round-1"
    out.mkdir()
    log = out / "job.log"
    log.write_text("Traceback (most recent call last):\nKeyError: matrix_instr_nonkdim\n")
    with pytest.raises(MeasurementFailed, match=f"wrote no {BENCH_CSV_NAME}") as info:
        score_upstream_pass(out, log, keep, "pass-1-baseline", targets)
    assert all(s.label in str(info.value) for s in targets)
    assert (keep / kept_names("pass-1-baseline")[1]).read_text() == log.read_text()
    assert "KeyError: matrix_instr_nonkdim" in str(info.value)


def test_a_pass_with_every_target_writes_the_pinned_csv(tmp_path: Path) -> None:
    targets = shapes_by_label("upstream", expand_selectors("upstream", [FOUR]))
    out, keep = tmp_path / "out", tmp_path / "keep"
    out.mkdir()
    upstream_bench_csv(upstream_rows(), out / BENCH_CSV_NAME, "\r\n")
    pinned = score_upstream_pass(out, None, keep, "pass-2-baseline", targets)
    assert read_csv(pinned, GEMM_SCHEMA).labels() == [s.label for s in targets]
    assert (keep / kept_names("pass-2-baseline")[0]).is_file()


def test_acceptance_scores_upstreams_csv_against_upstream_targets_only() -> None:
    """The full benchmark of ``campaign accept`` matches targets that name upstream's
    rows (or plain MxNxK); a set with labels of its own keeps upstream's row labels."""
    four = shapes_by_label("upstream", [*expand_selectors("upstream", [FOUR]), "8x8x8"])
    assert upstream_targets(four) == four
    assert upstream_targets(shape_set("models")) is None
    assert upstream_targets(shape_set("tiny")) is None
