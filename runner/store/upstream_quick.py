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

import difflib
import hashlib
import json
import pprint
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

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
_SHAPES = re.compile(r"^SHAPES\b[^=\n]*=\s*\[.*?^\]", re.DOTALL | re.MULTILINE)


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def record_path(campaign_root: Path) -> Path:
    return Path(campaign_root) / RECORD


def load_record(campaign_root: Path) -> dict[str, Any] | None:
    path = record_path(campaign_root)
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _save(campaign_root: Path, record: dict[str, Any], text: str) -> None:
    record.update(sha256=_sha(text), text=text)
    write_atomic(record_path(campaign_root), json.dumps(record, indent=1) + "\n")


def copy_template(source: Path, campaign_root: Path, backend: str) -> Path | None:
    """Copy upstream's template from the checkout ``source`` into the campaign with the
    backend set; None when the checkout has no template (another target)."""
    template = Path(source) / TEMPLATE
    if not template.is_file():
        return None
    text, count = _BACKEND_LINE.subn(rf'\g<1>"{backend.upper()}"', template.read_text("utf-8"))
    if count != 1:
        raise ConfigError(
            f'{template} has no `setdefault(..., "{BACKEND_MARK}")` line to set the backend '
            "in; it is not the template this tool knows (checked at a6a16cdc): check out a "
            "matching revision, or remove it from the checkout"
        )
    commit = cmd.run(["git", "-C", str(source), "rev-parse", "HEAD"]).stdout.strip()
    script = Path(campaign_root) / "quick_test_bench.py"
    write_atomic(script, text)
    _save(campaign_root, {"template": TEMPLATE, "commit": commit, "backend": backend}, text)
    return script


def fill_shapes(campaign_root: Path, script: Path, shapes: Sequence[dict[str, Any]]) -> None:
    """Set the script's ``SHAPES`` list (upstream's keys: label, M, N, K)."""
    text = script.read_text(encoding="utf-8")
    listed = pprint.pformat([dict(s) for s in shapes], sort_dicts=False, width=88)
    new, count = _SHAPES.subn(lambda _: f"SHAPES: List[Dict[str, Any]] = {listed}", text)
    if count != 1:
        raise ConfigError(
            f"{script}: no `SHAPES = [...]` list to fill; restore it from the template"
        )
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
