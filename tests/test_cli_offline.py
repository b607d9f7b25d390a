"""``campaign score`` and ``campaign gate``: JSON contracts, tables and exit codes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli, main
from runner.core.csv_io import write_csv
from runner.core.csv_schema import GEMM_SCHEMA, MEMORY_SCHEMA
from runner.core.errors import ConfigError, SchemaDriftError

ROOT = Path(__file__).resolve().parent.parent
DIM = 4096


def gemm(label: str, fwd: float, bwd: float, check: str = "PASS") -> dict[str, object]:
    """A consistent fwd+bwd GEMM row (times derived from the throughputs)."""
    flops = 2 * DIM**3
    return {
        "label": label,
        "B": 1,
        "M": DIM,
        "N": DIM,
        "K": DIM,
        "Check": check,
        "Forward TFLOPS": fwd if check == "PASS" else math.nan,
        "Forward TFLOPS_stddev": 0.5,
        "Backward TFLOPS": bwd,
        "Backward TFLOPS_stddev": 0.5,
        "Forward Time (ms)": flops / (fwd * 1e9),
        "Backward Time (ms)": 2 * flops / (bwd * 1e9),
        "out_snr": 40.0,
        "da_snr": 40.0,
        "db_snr": 40.0,
    }


def write(tmp_path: Path, name: str, rows: list[dict[str, object]], schema=GEMM_SCHEMA) -> str:
    path = tmp_path / name
    write_csv(path, schema, rows)
    return str(path)


def best_csv(tmp_path: Path) -> str:
    return write(tmp_path, "best.csv", [gemm("a", 400, 200), gemm("b", 300, 150)])


def cand_csv(tmp_path: Path, factor_a: float, factor_b: float | None = None) -> str:
    fb = factor_a if factor_b is None else factor_b
    rows = [gemm("a", 400 * factor_a, 200 * factor_a), gemm("b", 300 * fb, 150 * fb)]
    return write(tmp_path, "cand.csv", rows)


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def gate_json(tmp_path: Path, cand: str, *extra: str) -> tuple[int, dict]:
    result = invoke("gate", "--best", best_csv(tmp_path), "--candidate", cand, "--json", *extra)
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result.exit_code, json.loads(result.stdout)


# ---------------------------------------------------------------- score


def test_score_json(tmp_path: Path) -> None:
    result = invoke("score", best_csv(tmp_path), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"metric", "aggregate", "shapes", "pass", "fail"}
    assert data["metric"] == "Combined Step TFLOPS"
    assert data["aggregate"] == pytest.approx(207.846, abs=5e-4)
    assert (data["pass"], data["fail"]) == (2, 0)
    assert [set(s) for s in data["shapes"]] == [{"label", "value", "check"}] * 2
    assert data["shapes"][0]["label"] == "a"
    assert data["shapes"][0]["value"] == pytest.approx(240.0)
    assert data["shapes"][0]["check"] == "PASS"


def test_score_json_with_a_failed_row(tmp_path: Path) -> None:
    path = write(tmp_path, "f.csv", [gemm("a", 400, 200), gemm("b", 300, 150, check="ERROR")])
    data = json.loads(invoke("score", path, "--json").stdout)
    assert data["aggregate"] == 0.0
    assert data["shapes"][1] == {"label": "b", "value": None, "check": "FAIL"}
    assert (data["pass"], data["fail"]) == (1, 1)


def test_score_forward_metric(tmp_path: Path) -> None:
    data = json.loads(invoke("score", best_csv(tmp_path), "--metric", "forward", "--json").stdout)
    assert data["metric"] == "Forward TFLOPS"
    assert data["aggregate"] == pytest.approx(math.sqrt(400 * 300))


def test_score_table(tmp_path: Path) -> None:
    result = invoke("score", best_csv(tmp_path))
    assert result.exit_code == 0
    assert "| a " in result.stdout
    assert "240.000" in result.stdout
    assert "aggregate (Combined Step TFLOPS, geomean): 207.846" in result.stdout


def test_score_pinned_header(tmp_path: Path) -> None:
    header = tmp_path / "pinned.header"
    header.write_text(MEMORY_SCHEMA.header + "\n")
    result = invoke("score", best_csv(tmp_path), "--pinned-header", str(header))
    assert isinstance(result.exception, SchemaDriftError)
    best = best_csv(tmp_path)
    assert invoke("score", best, "--pinned-header", best, "--json").exit_code == 0


def test_score_metric_mismatch_is_a_config_error(tmp_path: Path) -> None:
    result = invoke("score", best_csv(tmp_path), "--metric", "gbps")
    assert isinstance(result.exception, ConfigError)


# ---------------------------------------------------------------- gate


def test_gate_accepts(tmp_path: Path) -> None:
    code, data = gate_json(tmp_path, cand_csv(tmp_path, 1.05))
    assert code == 0
    required = {
        "decision",
        "metric",
        "best_aggregate",
        "candidate_aggregate",
        "delta_pct",
        "shapes",
        "regressed",
        "reasons",
    }
    assert required <= set(data)
    extra = {"threshold_pct", "pairs_used", "evidence", "more_pairs", "pair_gains_pct"}
    assert set(data) - required <= extra
    assert data["decision"] == "ACCEPTED"
    assert data["metric"] == "Combined Step TFLOPS"
    assert data["best_aggregate"] == pytest.approx(207.846, abs=5e-4)
    assert data["candidate_aggregate"] == pytest.approx(207.846 * 1.05, abs=1e-3)
    assert data["delta_pct"] == pytest.approx(5.0)
    assert data["regressed"] == []
    assert [set(s) for s in data["shapes"]] == [
        {"label", "best", "candidate", "delta_pct", "check"}
    ] * 2
    assert data["shapes"][0]["label"] == "a"
    assert data["shapes"][0]["delta_pct"] == pytest.approx(5.0)


def test_gate_tradeoff_exits_0(tmp_path: Path) -> None:
    code, data = gate_json(tmp_path, cand_csv(tmp_path, 1.10, 0.98))
    assert code == 0
    assert data["decision"] == "ACCEPTED_TRADEOFF"
    assert data["regressed"] == ["b"]
    assert any("b -2.00%" in r for r in data["reasons"])


def test_gate_rolled_back_exits_3(tmp_path: Path) -> None:
    code, data = gate_json(tmp_path, cand_csv(tmp_path, 1.20, 0.90))
    assert code == 3
    assert data["decision"] == "ROLLED_BACK"
    assert "b -10.00%" in data["reasons"][0]


def test_gate_near_noise_exits_4(tmp_path: Path) -> None:
    code, data = gate_json(tmp_path, cand_csv(tmp_path, 1.015))
    assert code == 4
    assert data["decision"] == "NEEDS_REMEASURE"


def test_gate_sigma_option(tmp_path: Path) -> None:
    code, data = gate_json(tmp_path, cand_csv(tmp_path, 1.025), "--sigma-g", "0.01")
    assert (code, data["decision"], data["threshold_pct"]) == (4, "NEEDS_REMEASURE", 3.0)


def test_gate_candidate_fail(tmp_path: Path) -> None:
    cand = write(tmp_path, "c.csv", [gemm("a", 500, 250), gemm("b", 300, 150, check="FAIL")])
    code, data = gate_json(tmp_path, cand)
    assert code == 3
    assert data["candidate_aggregate"] == 0.0
    assert data["shapes"][1]["check"] == "FAIL"
    assert data["shapes"][1]["candidate"] is None


def test_gate_table(tmp_path: Path) -> None:
    result = invoke("gate", "--best", best_csv(tmp_path), "--candidate", cand_csv(tmp_path, 1.05))
    assert result.exit_code == 0
    assert "decision: ACCEPTED" in result.stdout
    assert "+5.00" in result.stdout


def test_gate_different_shapes_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = write(tmp_path, "c.csv", [gemm("a", 500, 250), gemm("z", 300, 150)])
    with pytest.raises(SystemExit) as info:
        main(["gate", "--best", best_csv(tmp_path), "--candidate", cand, "--json"])
    assert info.value.code == 2
    assert "missing ['b'], extra ['z']" in capsys.readouterr().err


def exit_of(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    """``campaign ARGV`` through ``main`` (errors mapped to exit codes): (code, stderr)."""
    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    return code if isinstance(code, int) else 1, capsys.readouterr().err


@pytest.mark.parametrize(("crlf_best", "crlf_cand"), [(False, True), (True, False), (True, True)])
def test_gate_reads_crlf_and_refuses_a_lone_cr(
    tmp_path: Path, crlf_best: bool, crlf_cand: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/protocol.md §4.4: CRLF line endings read like LF in either CSV (upstream's
    csv.DictWriter writes CRLF); a carriage return that ends no line stops the
    round (exit 2)."""
    best, cand = Path(best_csv(tmp_path)), Path(cand_csv(tmp_path, 1.05))
    for path, crlf in ((best, crlf_best), (cand, crlf_cand)):
        if crlf:
            path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    result = invoke("gate", "--best", str(best), "--candidate", str(cand), "--json")
    assert result.exit_code == 0 and json.loads(result.stdout)["decision"] == "ACCEPTED"
    cand.write_bytes(cand.read_bytes().replace(b"\r\n", b"\r").replace(b"\n", b"\r"))
    code, err = exit_of(["gate", "--best", str(best), "--candidate", str(cand), "--json"], capsys)
    assert code == 2 and "carriage return" in err, err
    code, err = exit_of(["score", str(cand), "--json"], capsys)
    assert code == 2 and "carriage return" in err, err


def _sparse(path: Path, size: int) -> Path:
    with open(path, "wb") as fh:
        fh.truncate(size)  # a file of NUL bytes that takes no disk
    return path


@pytest.mark.parametrize("size", [1 << 30, 50 << 20])
def test_score_huge_nul_file_is_refused_at_once(
    tmp_path: Path, size: int, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/reliability.md §7 row 4: a 1 GB or 50 MB file of NUL bytes is refused by size, before
    it is read (no memory spent), with a short message (no echo of the content)."""
    import resource

    path = _sparse(tmp_path / "nul.csv", size)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, err = exit_of(["score", str(path)], capsys)
    assert code == 2, err
    assert "MiB a benchmark CSV may be" in err and len(err) < 600, err
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 64 << 10  # KiB


def test_score_long_line_and_nul_header_are_short_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Under the size limit, a line over the line-length limit is refused by its
    line number; a header of NULs within it is a drift whose echo is capped."""
    path = _sparse(tmp_path / "line.csv", 1 << 20)
    code, err = exit_of(["score", str(path)], capsys)
    assert code == 2 and "line.csv:1: a line of 1048576 bytes" in err, err
    assert len(err) < 600
    path.write_bytes(b"\0" * 20000 + b"\n" + b"x" * 10)
    code, err = exit_of(["score", str(path)], capsys)
    assert code == 2, err
    assert len(err) < 2000 and "20000 characters" in err, err
    header = tmp_path / "h.txt"
    header.write_bytes(b"\0" * 70000)
    code, err = exit_of(["score", best_csv(tmp_path), "--pinned-header", str(header)], capsys)
    assert code == 2 and "not a CSV header" in err and len(err) < 600, err


def test_gate_drifted_candidate_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cand = Path(cand_csv(tmp_path, 1.05))
    cand.write_bytes(cand.read_bytes().replace(b"label,", b"Label,", 1))
    with pytest.raises(SystemExit) as info:
        main(["gate", "--best", best_csv(tmp_path), "--candidate", str(cand)])
    assert info.value.code == 2
    assert "renamed" in capsys.readouterr().err


def test_gate_candidate_of_another_schema_exit_2(tmp_path: Path) -> None:
    row = {c: "1" for c in MEMORY_SCHEMA.columns} | {"label": "a", "Check": "PASS"}
    cand = write(tmp_path, "m.csv", [row], MEMORY_SCHEMA)
    with pytest.raises(SystemExit) as info:
        main(["gate", "--best", best_csv(tmp_path), "--candidate", cand])
    assert info.value.code == 2


def test_gate_missing_file_exit_2(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gate", "--best", str(tmp_path / "none.csv"), "--candidate", "x.csv"])
    assert info.value.code == 2


@pytest.mark.parametrize(("factor", "code"), [(1.05, 0), (0.9, 3), (1.01, 4)])
def test_main_returns_the_verdict_code(tmp_path: Path, factor: float, code: int) -> None:
    with pytest.raises(SystemExit) as info:
        main(["gate", "--best", best_csv(tmp_path), "--candidate", cand_csv(tmp_path, factor)])
    assert info.value.code == code


def test_real_process_exit_code(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "runner", "gate", "--best", best_csv(tmp_path)]
    cmd += ["--candidate", cand_csv(tmp_path, 0.9), "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    assert proc.returncode == 3, proc.stderr
    assert json.loads(proc.stdout)["decision"] == "ROLLED_BACK"
