# ruff: noqa: UP006, UP035  (upstream spells the annotations with typing.List/Dict)
"""Fixture: stands for upstream's optimize-handoff/quick_test_bench.py (checked at
a6a16cdc): the same markers (the backend's setdefault line, an empty ``SHAPES`` list),
the same 15 columns written by ``csv.DictWriter`` (CRLF line endings), exit 1 when a
row is not PASS, the blockwise ``CONFIG`` block and the ``turbo.ops.gemm_fp8`` call
that init adapts to the campaign's op.  Not upstream code: no torch (its stand-in op
prints which op and granularity ran); a shape whose label is in FAIL_LABELS fails
its check."""

from __future__ import annotations

import argparse
import csv
import os
import sys
from typing import Any, Dict, List

os.environ.setdefault("PRIMUS_TURBO_GEMM_BACKEND", "<target_backend>")
if os.environ["PRIMUS_TURBO_GEMM_BACKEND"].startswith("<"):
    raise SystemExit("Replace <target_backend> in quick_test_bench.py")


class Format:  # fixture: upstream imports these three from low_precision
    E4M3 = "E4M3"


class ScalingGranularity:
    TENSORWISE, ROWWISE, BLOCKWISE = "TENSORWISE", "ROWWISE", "BLOCKWISE"


Float8QuantConfig = dict


class turbo:  # (fixture: upstream's `import primus_turbo.pytorch as turbo`)
    class ops:
        @staticmethod
        def gemm_fp8(a: Any, b: Any, trans_b: bool, config: Any) -> str:
            return f"gemm_fp8 {config['granularity']}"

        @staticmethod
        def gemm(a: Any, b: Any, trans_b: bool) -> str:
            return "gemm bf16"


SHAPES: List[Dict[str, Any]] = [
    # Fill from representative_shapes in manifest after BASELINE
]
FAIL_LABELS: List[str] = []

CONFIG = Float8QuantConfig(
    format=Format.E4M3,
    granularity=ScalingGranularity.BLOCKWISE,
    block_size=128,
)
SUMMARY_CSV_HEADER: List[str] = [
    "label", "B", "M", "N", "K", "Check",
    "Forward TFLOPS", "Forward TFLOPS_stddev", "Backward TFLOPS", "Backward TFLOPS_stddev",
    "Forward Time (ms)", "Backward Time (ms)", "out_snr", "da_snr", "db_snr",
]  # fmt: skip


def row(shape: Dict[str, Any]) -> Dict[str, Any]:
    ok = shape["label"] not in FAIL_LABELS
    flops = 2.0 * shape["M"] * shape["N"] * shape["K"]
    values = [
        1.0,
        0.01,
        2.0,
        0.02,
        flops / 1e9,
        flops / 1e9,
        40.0,
        40.0,
        40.0,
    ]  # ms at 1 and 2 TFLOPS
    cells = dict(zip(SUMMARY_CSV_HEADER[6:], values, strict=True))
    return {"label": shape["label"], "B": 1, "M": shape["M"], "N": shape["N"],
            "K": shape["K"], "Check": "PASS" if ok else "FAIL", **cells}  # fmt: skip


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--summary-csv", type=str, default=None)
    args = ap.parse_args()
    a = b = None
    print("op:", turbo.ops.gemm_fp8(a, b, trans_b=True, config=CONFIG))
    rows = [row(s) for s in SHAPES]
    for r in rows:
        print(f"{r['label']:<22} {r['Check']:<5} backend {os.environ['PRIMUS_TURBO_GEMM_BACKEND']}")
    if args.summary_csv:
        with open(args.summary_csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=SUMMARY_CSV_HEADER)
            w.writeheader()
            for r in rows:
                w.writerow(r)
    return 0 if all(r["Check"] == "PASS" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
