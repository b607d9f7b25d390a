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
SKIP rows (nothing measured) are left out.  A GEMM row's label carries its MBS
(``TestID-Case-MBS1-MxNxK``); scored against a campaign's target shapes, the rows are
those targets' (matched by Case and M, N, K: ``match_targets``) and a target without a
row is a TargetsMissing naming it.  A file already in the pinned schema (what
``python -m runner.worker.fullbench --out`` writes, e.g. for quantize, which upstream has no
training benchmark for) passes through unchanged.  Worker-side safe: standard library
and ``runner.core`` only.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence

from runner.core.csv_schema import ATTENTION_COLUMNS, GEMM_COLUMNS
from runner.core.errors import CsvValueError, TargetsMissing
from runner.core.shapes import Shape
from runner.core.upstream_shapes import parse_dims

BENCH_CSV_NAME = "upstream_benchmark.csv"
MAX_LISTED = 12  # rows of a CSV a missing-target message lists

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


def to_pinned(text: str, schema: str, targets: Sequence[Shape] | None = None) -> tuple[str, int]:
    """Upstream CSV text -> (the pinned-schema CSV text, number of rows left out).

    ``schema`` is the campaign's ``csv_schema`` (``gemm`` or ``attention``); a header
    without the upstream columns that schema needs is a CsvValueError naming them.
    With ``targets`` (a GEMM CSV), each row is the target it matches (``match_targets``)
    under the target's label, in the targets' order; the other rows are left out."""
    pinned = ATTENTION_COLUMNS if schema == "attention" else GEMM_COLUMNS
    if schema == "memory" or text.partition("\n")[0].removesuffix("\r") == ",".join(pinned):
        return text, 0  # already the pinned CSV (runner.worker.fullbench --out writes it)
    reader = csv.DictReader(io.StringIO(text, newline=""))
    header = reader.fieldnames or []
    needed = ATTENTION_KEYS if schema == "attention" else GEMM_KEYS
    missing = [c for c in (*needed, *TIMES) if c not in header]
    if missing:
        raise CsvValueError(
            f"the upstream benchmark CSV lacks {missing} (its header: {header}); "
            "it does not look like a Primus-Turbo training benchmark's --output file"
        )
    every = list(reader)
    rows = [row for row in every if row["Check"] != "SKIP"]
    skipped = len(every) - len(rows)
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(pinned)
    if schema == "attention":
        writer.writerows(_attention_row(row) for row in rows)
    elif targets is not None:
        matched = match_targets(rows, targets)
        writer.writerows(_gemm_row(row, label) for label, row in matched)
        skipped = len(rows) - len(matched)
    else:
        writer.writerows(_gemm_row(row, _gemm_label(row)) for row in rows)
    return out.getvalue(), skipped


def _attention_row(row: dict[str, str]) -> list[str]:
    label = (
        f"{row['TestID']}-B{row['Batch']}-H{row['num_head_q']}-S{row['SeqLen']}"
        f"-D{row['head_dim_qk']}-{row.get('Layout', '')}"
    )
    dims = [row["Batch"], row["num_head_q"], row["SeqLen"], row["head_dim_qk"]]
    return [label, *dims, _causal(row["Causal"]), *_results(row), "-", "-", "-", "-"]


def _results(row: dict[str, str]) -> list[str]:
    """Check, forward TFLOPS and its (unreported) stddev, backward likewise, the times."""
    fwd, bwd = _number(row["Forward TFLOPS"]), _number(row["Backward TFLOPS"])
    return [_check(row["Check"]), fwd, "0", bwd, "0", *(_number(row[t]) for t in TIMES)]


def _groups(row: dict[str, str]) -> str:
    """The pinned B column: grouped GEMM's groups (its ``B``); a plain GEMM's is 1, its
    MBS being already in M (bench_gemm_turbo.py writes M = seqlen * MBS)."""
    return row.get("B") or "1"


def _gemm_label(row: dict[str, str]) -> str:
    dims = f"{row['M']}x{row['N']}x{row['K']}"
    if row.get("MBS"):
        return f"{row['TestID']}-{row['Case']}-MBS{row['MBS']}-{dims}"
    return f"{row['TestID']}-{row['Case']}-B{_groups(row)}-{dims}"


def _gemm_row(row: dict[str, str], label: str) -> list[str]:
    dims = [_groups(row), row["M"], row["N"], row["K"]]
    return [label, *dims, *_results(row), "-", "-", "-"]


def _dims(row: dict[str, str]) -> tuple[int, int, int] | None:
    try:
        return int(row["M"]), int(row["N"]), int(row["K"])
    except (TypeError, ValueError):
        return None


def upstream_targets(shapes: Sequence[Shape]) -> list[Shape] | None:
    """``shapes`` when each is one of upstream's rows (``params["case"]``, from an
    upstream shape set) or a plain ``MxNxK`` (its label its dimensions): the targets a GEMM CSV of
    upstream's benchmark is scored against; None for other sets (their own labels)."""
    if shapes and all("case" in s.params or parse_dims(s.label) for s in shapes):
        return list(shapes)
    return None


def match_targets(
    rows: Sequence[dict[str, str]], targets: Sequence[Shape]
) -> list[tuple[str, dict[str, str]]]:
    """(target label, its row) for every target, in the targets' order.  A target from
    an upstream set (``params["case"]``) matches the first row of that Case with its M,
    N and K; a plain ``MxNxK`` one the first row with those dimensions.  A target no row
    matches is a TargetsMissing naming each one (and what the CSV holds)."""
    matched, missing = [], []
    for shape in targets:
        case = shape.params.get("case")
        found = next(
            (
                row
                for row in rows
                if _dims(row) == (shape.m, shape.n, shape.k)
                and (case is None or row.get("Case") == case)
            ),
            None,
        )
        if found is None:
            missing.append(shape.label)
        else:
            matched.append((shape.label, found))
    if missing:
        raise TargetsMissing(_missing_message(missing, len(targets), rows), missing)
    return matched


def _missing_message(missing: list[str], total: int, rows: Sequence[dict[str, str]]) -> str:
    held = [
        f"{r.get('Case')} MBS{r.get('MBS') or '?'} {r.get('M')}x{r.get('N')}x{r.get('K')}"
        for r in rows[:MAX_LISTED]
    ]
    more = f" and {len(rows) - MAX_LISTED} more" if len(rows) > MAX_LISTED else ""
    return (
        f"the benchmark's CSV has no row for {len(missing)} of the {total} target shapes "
        f"(matched by Case and M, N, K): {', '.join(missing)}; its {len(rows)} rows: "
        f"{'; '.join(held) or 'none'}{more}. Check that the benchmark command measures "
        "these shapes (upstream's bench_gemm_turbo.py writes every row of its config.py), "
        "or pick target shapes it writes (campaign init --shape-set upstream)"
    )
