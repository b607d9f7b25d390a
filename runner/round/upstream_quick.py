"""Running upstream's quick script (``runner.store.upstream_quick``) in BASELINE and
every VALIDATE, beside the paired measurement.

The paired measurement stays the gate's evidence; the quick script is upstream's own
check, with its own timing engine (a ``time.perf_counter`` loop): its numbers are kept
(``artifacts/quick_benchmark.csv``, the log as upstream names it) and never compared
with the gate's (docs/protocol.md).  Its ``Check`` column is a hard gate: a FAIL row,
a non-zero exit or a CSV the pinned reader refuses stops the round."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from runner.core.errors import CampaignError, MeasurementFailed
from runner.core.files import write_atomic
from runner.core.spec import OUT_ENV
from runner.measure.host import run_job
from runner.store.upstream_quick import (
    QUICK_CSV,
    failed_rows,
    load_record,
    read_quick_csv,
    take_edit,
)

if TYPE_CHECKING:
    from runner.round.context import RoundPlan


def has_upstream_quick(rnd: RoundPlan) -> bool:
    return load_record(rnd.campaign.root) is not None


def run_quick(rnd: RoundPlan, tree: Path, role: str, log_name: str) -> str:
    """Run the campaign's quick_test_bench.py on ``tree`` through the executor; the log
    and the CSV go into the round's artifacts.  Returns the log text."""
    campaign = rnd.campaign
    script = campaign.quick_script
    note = take_edit(campaign.root, script)
    command = f'python "${OUT_ENV}/{script.name}" --summary-csv "${OUT_ENV}/{QUICK_CSV}"'
    spec = rnd.template.for_pass(
        role,
        0,
        [],
        mode="test",
        command=command,
        files={script.name: script.read_text(encoding="utf-8")},
    )
    outcome = run_job(rnd, f"quick-{role}", spec, tree)
    log = outcome.out_dir / "test.log"
    text = (note + "\n" if note else "") + (log.read_text(encoding="utf-8") if log.exists() else "")
    artifacts = campaign.artifacts_dir(rnd.round)
    artifacts.mkdir(parents=True, exist_ok=True)
    write_atomic(artifacts / log_name, text)
    produced = outcome.out_dir / QUICK_CSV
    if not produced.is_file():
        raise MeasurementFailed(
            f"quick_test_bench.py wrote no CSV on the {role} (exit {outcome.returncode}); "
            f"see {log_name}",
            log,
        )
    shutil.copy2(produced, artifacts / QUICK_CSV)
    try:
        rows = read_quick_csv(produced, rnd.manifest.pinned_header)
    except CampaignError as exc:
        raise MeasurementFailed(f"quick_test_bench.py's CSV on the {role}: {exc}", log) from exc
    failed = failed_rows(rows)
    if failed:
        raise MeasurementFailed(
            f"quick_test_bench.py reports Check FAIL on the {role} for {', '.join(failed)}: "
            f"upstream's hard gate rejects it (see {log_name})",
            log,
        )
    if outcome.returncode != 0:
        raise MeasurementFailed(
            f"quick_test_bench.py exited {outcome.returncode} on the {role}", log
        )
    return text
