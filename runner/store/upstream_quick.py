"""Upstream's quick script as the campaign's ``quick_test_bench.py``.

Primus-Turbo's hand-off page (the skill page of
``agent/skills/primus-turbo-develop/optimize-handoff/``, checked at a6a16cdc) has
PREPARE_ENVIRONMENT copy its template ``optimize-handoff/quick_test_bench.py`` into
``<campaign_dir>/quick_test_bench.py`` with ``SHAPES`` empty and ``<target_backend>`` set;
BASELINE fills ``SHAPES`` (every target shape), then narrows it to the representative
shapes for the VALIDATE rounds, each of which runs it with ``--summary-csv``. This module
does the file work: ``copy_template`` at init (the commit recorded in
``quick_test_bench.upstream.json``), ``fill_shapes`` at BASELINE, ``take_edit`` before
each run (an engineer's edit of the campaign's copy takes effect in that run and is named
in its log), ``read_quick_csv`` (the pinned reader; the template writes with
``csv.DictWriter``, CRLF line endings).
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import pprint
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from runner.core import processes as cmd
from runner.core.csv_io import read_csv
from runner.core.csv_schema import BenchCSV
from runner.core.errors import ConfigError
from runner.core.files import write_atomic

TEMPLATE = "agent/skills/primus-turbo-develop/optimize-handoff/quick_test_bench.py"
RECORD = "quick_test_bench.upstream.json"
BACKEND_MARK = "<target_backend>"
# upstream's names for the quick run's log (upstream's loop and skill pages at a6a16cdc)
BASELINE_LOG = "quick_baseline.log"
VALIDATION_LOG = "quick_validation.log"
QUICK_CSV = "quick_benchmark.csv"  # artifacts/benchmark.csv is the paired measurement
_BACKEND_LINE = re.compile(r"""(setdefault\(\s*["'][A-Z_]+["']\s*,\s*)["']<target_backend>["']""")
# The template is written for the blockwise FP8 GEMM (a6a16cdc): its CONFIG block and
# the op call in run_one.  Adapted per campaign: the FP8 GEMM's other granularities
# change CONFIG; the BF16 GEMM calls turbo.ops.gemm without a config.
_CONFIG = re.compile(r"^CONFIG = Float8QuantConfig\(.*?^\)", re.DOTALL | re.MULTILINE)
_FP8_CALL = "turbo.ops.gemm_fp8(a, b, trans_b=True, config=CONFIG)"
_FP8_GRANULARITY = {"tensorwise": "TENSORWISE", "rowwise": "ROWWISE", "blockwise": "BLOCKWISE"}
ADAPTED_OPS = ("gemm", "gemm_fp8")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_path(campaign_root: Path) -> Path:
    return Path(campaign_root) / RECORD


class QuickRecord(TypedDict, total=False):
    """The script's record: the template it was copied from (``template``, ``commit``,
    ``backend``, ``op``, ``granularity``) and what the tool last wrote or ran of it
    (``sha256``, ``text``)."""

    template: str
    commit: str
    backend: str
    op: str
    granularity: str | None
    sha256: str
    text: str


def load_record(campaign_root: Path) -> QuickRecord | None:
    path = record_path(campaign_root)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _save(campaign_root: Path, record: QuickRecord, text: str) -> None:
    record.update({"sha256": _sha(text), "text": text})
    write_atomic(record_path(campaign_root), json.dumps(record, indent=1) + "\n")


def adapts(op: str, granularity: str | None) -> bool:
    """Whether upstream's template can be adapted to the campaign's op and granularity
    (the GEMMs it is written for); otherwise the tool's own quick script is used."""
    return op == "gemm" or (op == "gemm_fp8" and granularity in _FP8_GRANULARITY)


def adapt(text: str, op: str, granularity: str | None, where: Path) -> str:
    """The template's op and config set for the campaign: ``CONFIG`` with the FP8
    granularity (block_size 128 for blockwise, none otherwise), or the BF16 GEMM."""
    if op == "gemm_fp8" and granularity == "blockwise":
        return text  # the template's own op
    if op == "gemm":
        config, call = (
            "CONFIG = None  # the BF16 GEMM takes no quantisation config",
            ("turbo.ops.gemm(a, b, trans_b=True)"),
        )
    else:
        gran = _FP8_GRANULARITY[str(granularity)]
        config = (
            "CONFIG = Float8QuantConfig(\n    format=Format.E4M3,\n"
            f"    granularity=ScalingGranularity.{gran},\n)"
        )
        call = _FP8_CALL
    new, count = _CONFIG.subn(lambda _: config, text)
    if count != 1 or _FP8_CALL not in new:
        raise ConfigError(
            f"{where}: no `CONFIG = Float8QuantConfig(...)` block or `{_FP8_CALL}` call to "
            f"adapt to {op} ({granularity}); it is not the template this tool knows "
            "(checked at a6a16cdc): check out a matching revision, or remove it"
        )
    return new.replace(_FP8_CALL, call)


def copy_template(
    source: Path,
    campaign_root: Path,
    backend: str,
    op: str = "gemm_fp8",
    granularity: str | None = "blockwise",
) -> Path | None:
    """Copy upstream's template from the checkout ``source`` into the campaign with the
    backend set and the op adapted; None when the checkout has no template (another
    target) or the campaign's op is not one it can be adapted to (``adapts``)."""
    template = Path(source) / TEMPLATE
    if not template.is_file() or not adapts(op, granularity):
        return None
    text = adapt(template.read_text("utf-8"), op, granularity, template)
    text, count = _BACKEND_LINE.subn(rf'\g<1>"{backend.upper()}"', text)
    if count != 1:
        raise ConfigError(
            f'{template} has no `setdefault(..., "{BACKEND_MARK}")` line to set the backend '
            "in; it is not the template this tool knows (checked at a6a16cdc): check out a "
            "matching revision, or remove it from the checkout"
        )
    commit = cmd.run(["git", "-C", str(source), "rev-parse", "HEAD"]).stdout.strip()
    script = Path(campaign_root) / "quick_test_bench.py"
    write_atomic(script, text)
    record: QuickRecord = {"template": TEMPLATE, "commit": commit, "backend": backend}
    _save(campaign_root, {**record, "op": op, "granularity": granularity}, text)
    return script


def _assigns_shapes_list(node: ast.stmt) -> bool:
    """``node`` is ``SHAPES = [...]`` (annotated or not)."""
    if isinstance(node, ast.Assign):
        targets = node.targets
    elif isinstance(node, ast.AnnAssign):
        targets = [node.target]
    else:
        return False
    named = any(isinstance(t, ast.Name) and t.id == "SHAPES" for t in targets)
    return named and isinstance(node.value, ast.List)


def _shapes_lines(text: str, script: Path) -> tuple[int, int]:
    """The first and last line (0-based, inclusive) of the script's one top-level
    ``SHAPES = [...]`` assignment, found by parsing: its list may hold a line that starts
    with ``]`` nowhere but at its own end, and the template's next list
    (``SUMMARY_CSV_HEADER``) must never be taken for its end."""
    try:
        tree = ast.parse(text, filename=str(script))
    except SyntaxError as e:
        why = f"not valid Python ({e.msg}, line {e.lineno}); restore it from the template"
        raise ConfigError(f"{script}: {why}") from e
    spans = [
        (node.lineno - 1, (node.end_lineno or node.lineno) - 1)
        for node in tree.body
        if _assigns_shapes_list(node)
    ]
    if len(spans) != 1:
        raise ConfigError(
            f"{script}: no single `SHAPES = [...]` list to fill; restore it from the template"
        )
    return spans[0]


def shapes_block(shapes: Sequence[Mapping[str, object]]) -> str:
    """``SHAPES`` as the template writes its list: one shape a line, the closing bracket
    on a line of its own."""
    rows = [f"    {pprint.pformat(dict(s), sort_dicts=False, width=10_000)},\n" for s in shapes]
    return "SHAPES: List[Dict[str, Any]] = [\n" + "".join(rows) + "]\n"


def fill_shapes(campaign_root: Path, script: Path, shapes: Sequence[Mapping[str, object]]) -> None:
    """Set the script's ``SHAPES`` list (upstream's keys: label, M, N, K); the rest of
    the script is kept byte for byte, however often it is filled."""
    text = script.read_text(encoding="utf-8")
    first, last = _shapes_lines(text, script)
    lines = text.splitlines(keepends=True)
    new = "".join([*lines[:first], shapes_block(shapes), *lines[last + 1 :]])
    write_atomic(script, new)
    record = load_record(campaign_root) or {}
    _save(campaign_root, record, new)


def take_edit(campaign_root: Path, script: Path) -> str:
    """The note for a run: empty, or the engineer's edit of the script since the tool
    last wrote or ran it (a unified diff), which takes effect in this run."""
    record = load_record(campaign_root)
    text = script.read_text(encoding="utf-8")
    if record is None or record.get("sha256") == _sha(text):
        return ""
    diff = "".join(
        difflib.unified_diff(
            str(record.get("text", "")).splitlines(keepends=True),
            text.splitlines(keepends=True),
            "quick_test_bench.py (last run)",
            "quick_test_bench.py (this run)",
        )
    )
    _save(campaign_root, record, text)
    return f"quick_test_bench.py was edited since its last run; the edit takes effect now:\n{diff}"


def read_quick_csv(path: Path, pinned: str | None) -> BenchCSV:
    """The quick script's CSV through the pinned reader; ``csv.DictWriter``'s CRLF
    line endings are read as LF (the columns are what the reader checks)."""
    return read_csv(path, pinned or None)


def failed_rows(csv: BenchCSV) -> list[str]:
    return [row.label for row in csv.rows if row.check != "PASS"]
