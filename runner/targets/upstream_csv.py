"""Primus-Turbo's training-benchmark CSV, mapped onto the pinned schema.

Upstream's ``benchmark/ops/training/bench_*_turbo.py`` (checked at AMD-AGI/Primus-Turbo
``a6a16cdce46bd2235a248b41f501fb363c215b9b``) print a table and write their CSV to the
file named by ``--output`` (pandas ``to_csv``, no index).  Columns:

* GEMM: TestID, Platform, GPU, Case, MBS, M, N, K, Dtype, [Granularity], Check,
  Forward Time (ms), Forward TFLOPS, Backward Time (ms), Backward TFLOPS
  (Granularity only for FP8);
* grouped GEMM: the same with ``B`` (groups) in place of ``MBS``;
* dense attention: TestID, Platform, GPU, Batch, SeqLen, SeqLenKV, num_head_q,
  num_head_kv, head_dim_qk, head_dim_v, Causal, Window, Layout, Deterministic, Backend,
  Check, Forward Time (ms), Forward TFLOPS, Backward Time (ms), Backward TFLOPS.

Check is PASS, FAIL, ERROR (the times then read ``ERROR``) or, for attention, SKIP.
Values are formatted ``%.2f``; upstream reports a mean only, so the pinned schema's
``*_stddev`` columns are written ``0`` (not reported) and the SNR columns ``-``.
SKIP rows (nothing measured) are left out.  A file already in the pinned schema (what
``python -m runner.fullbench --out`` writes, e.g. for quantize, which upstream has no
training benchmark for) passes through unchanged.  Worker-side safe: standard library only.
"""

from __future__ import annotations

import csv
import io

from runner.core.csv_schema import ATTENTION_COLUMNS, GEMM_COLUMNS
from runner.core.errors import CsvValueError

BENCH_CSV_NAME = "upstream_benchmark.csv"

GEMM_KEYS = ("TestID", "Case", "M", "N", "K", "Check", "Forward TFLOPS", "Backward TFLOPS")
ATTENTION_KEYS = ("TestID", "Batch", "SeqLen", "num_head_q", "head_dim_qk", "Causal", "Check")
TIMES = ("Forward Time (ms)", "Backward Time (ms)")


def _number(text: str) -> str:
    """A cell as a number for the pinned CSV: upstream's ``ERROR`` becomes ``nan``."""
    try:
        float(text)
    except ValueError:
        return "nan"
    return text


def _check(text: str) -> str:
    return text if text in ("PASS", "FAIL", "ERROR") else "ERROR"


def _causal(text: str) -> str:
    return "1" if text.strip().lower() in ("true", "1") else "0"


def to_pinned(text: str, schema: str) -> tuple[str, int]:
    """Upstream CSV text -> (the pinned-schema CSV text, number of rows left out).

    ``schema`` is the campaign's ``csv_schema`` (``gemm`` or ``attention``); a header
    without the upstream columns that schema needs is a CsvValueError naming them."""
    pinned = ATTENTION_COLUMNS if schema == "attention" else GEMM_COLUMNS
    if schema == "memory" or text.partition("\n")[0].removesuffix("\r") == ",".join(pinned):
        return text, 0  # already the pinned CSV (runner.fullbench --out writes it)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    needed = ATTENTION_KEYS if schema == "attention" else GEMM_KEYS
    missing = [c for c in (*needed, *TIMES) if c not in header]
    if missing:
        raise CsvValueError(
            f"the upstream benchmark CSV lacks {missing} (its header: {header}); "
            "it does not look like a Primus-Turbo training benchmark's --output file"
        )
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    skipped = 0
    writer.writerow(pinned)
    for row in reader:
        if row["Check"] == "SKIP":
            skipped += 1
            continue
        times = [_number(row[t]) for t in TIMES]
        fwd, bwd = _number(row["Forward TFLOPS"]), _number(row["Backward TFLOPS"])
        if schema == "attention":
            label = (
                f"{row['TestID']}-B{row['Batch']}-H{row['num_head_q']}-S{row['SeqLen']}"
                f"-D{row['head_dim_qk']}-{row.get('Layout', '')}"
            )
            dims = [row["Batch"], row["num_head_q"], row["SeqLen"], row["head_dim_qk"]]
            writer.writerow(
                [label, *dims, _causal(row["Causal"]), _check(row["Check"]), fwd, "0", bwd,
                 "0", *times, "-", "-", "-", "-"]
            )  # fmt: skip
        else:
            b = row.get("B") or "1"
            label = f"{row['TestID']}-{row['Case']}-B{b}-{row['M']}x{row['N']}x{row['K']}"
            writer.writerow(
                [label, b, row["M"], row["N"], row["K"], _check(row["Check"]), fwd, "0", bwd,
                 "0", *times, "-", "-", "-"]
            )  # fmt: skip
    return out.getvalue(), skipped
