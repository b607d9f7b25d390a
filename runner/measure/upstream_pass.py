"""One pass of a target's own benchmark (Primus-Turbo's ``bench_*_turbo.py``), scored
against the campaign's target shapes.

What the benchmark wrote is kept first, whatever follows: its CSV (as written, named
``<pass>-upstream_benchmark.csv``) and its log (``<pass>.log``) are copied into the
folder the caller keeps (a round's folder), then the CSV is mapped onto the pinned
schema with the targets' labels (``runner.targets.upstream_csv.to_pinned``).  No CSV,
or one without a row for every target, is a ``MeasurementFailed`` that names each
missing target and ends with the kept log's tail: the round is FAILED, nothing lost.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.errors import CsvValueError, MeasurementFailed
from runner.core.files import write_atomic
from runner.core.shapes import Shape
from runner.targets.upstream_csv import BENCH_CSV_NAME, to_pinned


def kept_names(name: str) -> tuple[str, str]:
    """The kept CSV's and log's file names of pass ``name``."""
    return f"{name}-{BENCH_CSV_NAME}", f"{name}.log"


def keep_pass_files(out_dir: Path, log: Path | None, keep_dir: Path, name: str) -> Path | None:
    """Copy the pass's upstream CSV (if written) and its log into ``keep_dir``; returns
    the kept log's path (None when the pass left no log)."""
    keep_dir.mkdir(parents=True, exist_ok=True)
    csv_name, log_name = kept_names(name)
    written = out_dir / BENCH_CSV_NAME
    if written.is_file():
        shutil.copy2(written, keep_dir / csv_name)
    if log is None or not log.is_file():
        return None
    shutil.copy2(log, keep_dir / log_name)
    return keep_dir / log_name


def score_upstream_pass(
    out_dir: Path,
    log: Path | None,
    keep_dir: Path,
    name: str,
    targets: Sequence[Shape],
    schema: str = "gemm",
) -> Path:
    """The pinned CSV (``out_dir/benchmark.csv``) of the pass whose benchmark wrote
    ``out_dir/upstream_benchmark.csv``, its rows the ``targets`` (by their labels, in
    their order).  Its CSV and ``log`` are kept in ``keep_dir`` first; no CSV, or one
    lacking a target, is a MeasurementFailed naming the targets and the kept files."""
    kept_log = keep_pass_files(out_dir, log, keep_dir, name)
    labels = ", ".join(s.label for s in targets)
    where = f"kept in {keep_dir}" if kept_log else f"no log; out dir {out_dir}"
    written = out_dir / BENCH_CSV_NAME
    if not written.is_file():
        raise MeasurementFailed(
            f"pass {name}: the benchmark command wrote no {BENCH_CSV_NAME} (its --output), "
            f"so none of the {len(targets)} target shapes was measured: {labels} ({where})",
            kept_log,
        )
    try:
        pinned, _ = to_pinned(written.read_text(encoding="utf-8"), schema, targets)
    except CsvValueError as exc:
        raise MeasurementFailed(f"pass {name}: {exc} ({where})", kept_log) from None
    dest = out_dir / BENCHMARK_CSV
    write_atomic(dest, pinned)
    return dest
