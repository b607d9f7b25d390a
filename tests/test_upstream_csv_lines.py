"""docs/protocol.md §4.4: the quick script's CSV read as upstream writes it.

Upstream's ``optimize-handoff/quick_test_bench.py`` (Primus-Turbo a6a16cdc) writes its
summary with ``csv.DictWriter`` on a file opened with ``newline=""``, so every line ends
with CRLF.  Every reader here (the pinned header, a round's passes, ``campaign score``,
``campaign gate``, the MCP ``parse_bench_csv``) checks columns as columns: LF and CRLF
both read, while a BOM, a renamed, moved, added or missing column, stray whitespace or a
lone carriage return still stop the round with the message they gave before.  The files
are written here as upstream writes them; the suite has no copy of upstream.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.cli.mcp_server import TurboTools
from runner.core.csv_io import check_header, read_csv, write_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import SchemaDriftError
from runner.judge.json_contract import read_pinned_header, score_csv
from runner.measure.passes import read_passes, write_merged

# SUMMARY_CSV_HEADER of agent/skills/primus-turbo-develop/optimize-handoff/
# quick_test_bench.py, checked at Primus-Turbo a6a16cdc.
UPSTREAM_HEADER = [
    "label",
    "B",
    "M",
    "N",
    "K",
    "Check",
    "Forward TFLOPS",
    "Forward TFLOPS_stddev",
    "Backward TFLOPS",
    "Backward TFLOPS_stddev",
    "Forward Time (ms)",
    "Backward Time (ms)",
    "out_snr",
    "da_snr",
    "db_snr",
]
LF_HEADER = ",".join(UPSTREAM_HEADER)


def upstream_row(label: str, m: int, fwd: float, bwd: float) -> dict[str, object]:
    """A row as upstream's ``run_one`` returns it (floats, DictWriter formats them)."""
    flops = 2.0 * m * 4096 * 4096
    return {
        "label": label,
        "B": 1,
        "M": m,
        "N": 4096,
        "K": 4096,
        "Check": "PASS",
        "Forward TFLOPS": fwd,
        "Forward TFLOPS_stddev": 1.25,
        "Backward TFLOPS": bwd,
        "Backward TFLOPS_stddev": 2.5,
        "Forward Time (ms)": flops / (fwd * 1e9),
        "Backward Time (ms)": 2 * flops / (bwd * 1e9),
        "out_snr": 31.2,
        "da_snr": 30.1,
        "db_snr": math.inf,
    }


def failed_row(label: str) -> dict[str, object]:
    """Upstream's ``_failed_row``: FAIL with NaN figures."""
    row: dict[str, object] = {c: math.nan for c in UPSTREAM_HEADER}
    return row | {"label": label, "B": 1, "M": 64, "N": 4096, "K": 4096, "Check": "FAIL"}


def dictwriter_csv(
    path: Path, rows: list[dict[str, object]], header: list[str] | None = None
) -> Path:
    """Write ``rows`` exactly as upstream's quick script does (csv.DictWriter, CRLF)."""
    fields = header or UPSTREAM_HEADER
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in fields})
    return path


def upstream_csv(tmp_path: Path, name: str = "benchmark.csv", scale: float = 1.0) -> Path:
    rows = [
        upstream_row("small", 256, 180.0 * scale, 90.0 * scale),
        upstream_row("large", 8192, 610.0 * scale, 300.0 * scale),
    ]
    return dictwriter_csv(tmp_path / name, rows)


def test_a_dictwriter_csv_has_crlf_and_reads_under_every_pin(tmp_path: Path) -> None:
    path = upstream_csv(tmp_path)
    assert path.read_bytes().count(b"\r\n") == 3  # header and two rows
    for pinned in (None, LF_HEADER, LF_HEADER + "\r", GEMM_SCHEMA):
        got = read_csv(path, pinned=pinned)
        assert got.schema.name == "gemm" and got.header == LF_HEADER
        assert got.labels() == ["small", "large"]
        assert got.rows[1].number("Forward TFLOPS") == 610.0
    with_fail = dictwriter_csv(tmp_path / "f.csv", [upstream_row("a", 256, 1, 1), failed_row("b")])
    assert [r.check for r in read_csv(with_fail, pinned=LF_HEADER).rows] == ["PASS", "FAIL"]
    check_header(LF_HEADER + "\r", LF_HEADER)  # the line ending is not part of a column
    check_header(LF_HEADER, LF_HEADER + "\r\n")


def test_the_pinned_header_file_may_be_crlf_and_score_reads_either_way(tmp_path: Path) -> None:
    crlf = upstream_csv(tmp_path, "crlf.csv")
    lf = tmp_path / "lf.csv"
    write_csv(lf, GEMM_SCHEMA, [dict(r.values) for r in read_csv(crlf).rows])
    assert b"\r" not in lf.read_bytes()
    assert read_pinned_header(str(crlf)) == LF_HEADER
    assert score_csv(str(crlf), pinned_header=str(lf)).aggregate == pytest.approx(
        score_csv(str(lf), pinned_header=str(crlf)).aggregate
    )


def test_campaign_score_and_gate_read_upstream_csvs(tmp_path: Path) -> None:
    best = upstream_csv(tmp_path, "best.csv")
    cand = upstream_csv(tmp_path, "cand.csv", scale=1.3)
    lf_best = tmp_path / "lf_best.csv"
    write_csv(lf_best, GEMM_SCHEMA, [dict(r.values) for r in read_csv(best).rows])
    runner = CliRunner()
    scored = runner.invoke(cli, ["score", str(cand), "--pinned-header", str(best), "--json"])
    assert scored.exit_code == 0, scored.output
    assert json.loads(scored.stdout)["pass"] == 2
    for b in (best, lf_best):
        gated = runner.invoke(cli, ["gate", "--best", str(b), "--candidate", str(cand), "--json"])
        assert gated.exit_code == 0, gated.output
        assert json.loads(gated.stdout)["decision"] == "ACCEPTED"


def test_mcp_parse_bench_csv_and_a_rounds_passes_read_upstream_csvs(tmp_path: Path) -> None:
    crlf = upstream_csv(tmp_path)
    parsed = TurboTools(tmp_path).parse_bench_csv(str(crlf))
    assert parsed.csv_schema == "gemm"
    assert [r.label for r in parsed.rows] == ["small", "large"]
    lf = tmp_path / "lf.csv"
    write_csv(lf, GEMM_SCHEMA, [dict(r.values) for r in read_csv(crlf).rows])
    passes = read_passes([crlf, lf], pinned=LF_HEADER)  # a round's passes, either ending
    merged = write_merged(tmp_path / "merged.csv", passes)
    assert merged.header == LF_HEADER and merged.labels() == ["small", "large"]


def _moved(cols: list[str]) -> list[str]:
    out = list(cols)
    out[2], out[3] = out[3], out[2]
    return out


@pytest.mark.parametrize(
    ("header", "named"),
    [
        (["\ufefflabel", *UPSTREAM_HEADER[1:]], "byte-order mark"),
        (
            [("Fwd TFLOPS" if c == "Forward TFLOPS" else c) for c in UPSTREAM_HEADER],
            "column 7 renamed: pinned 'Forward TFLOPS', found 'Fwd TFLOPS'",
        ),
        (_moved(UPSTREAM_HEADER), "'M' at position 4 (pinned 3)"),
        ([*UPSTREAM_HEADER, "note"], "extra column 'note' at position 16"),
        (UPSTREAM_HEADER[:-1], "missing column 'db_snr' (pinned position 15)"),
        (
            [(" M" if c == "M" else c) for c in UPSTREAM_HEADER],
            "column 3 ' M' has leading or trailing whitespace",
        ),
    ],
)
def test_drift_in_a_crlf_csv_still_stops_the_round(
    tmp_path: Path, header: list[str], named: str
) -> None:
    row = upstream_row("small", 256, 180.0, 90.0) | {"note": "x", "\ufefflabel": "small", " M": 256}
    path = dictwriter_csv(tmp_path / "drift.csv", [row], header)
    for pinned in (LF_HEADER, None):
        with pytest.raises(SchemaDriftError, match=re.escape(named)) as info:
            read_csv(path, pinned=pinned)
        assert info.value.return_code == 2


def test_a_lone_carriage_return_still_stops_the_round(tmp_path: Path) -> None:
    path = upstream_csv(tmp_path)
    path.write_bytes(path.read_bytes().replace(b"small,", b"sm\rall,"))
    with pytest.raises(SchemaDriftError, match="line 2 holds a carriage return"):
        read_csv(path, pinned=LF_HEADER)
    with pytest.raises(SchemaDriftError, match="carriage return that does not end the line"):
        check_header(LF_HEADER.replace(",M,", ",M\r,"), LF_HEADER)
