"""Running upstream's quick script (``runner.store.upstream_quick``) in BASELINE and
every VALIDATE, beside the paired measurement.

In a VALIDATE that measures a GPU target with serving workers, the candidate's script
runs beside the workers' start-up (``QuickCheck``, a ``BesideStartUp``), and the first
timed turn waits for it and fails the round when it failed.  Its own ``python`` holds
the device's preparation lock (``COMMAND_LOCK_ENV``,
``runner.worker.bench.autotune_alone.join_as_command``): its autotune sweeps time their
configs alone, as a worker's do, and keep the choice in the candidate's JIT cache,
where the candidate's workers read it instead of timing the configs again; from its
first sweep to its end no worker prepares, so its own timings see no other work.
Elsewhere (the CPU, docker, Slurm) it runs first, as before.

The paired measurement stays the gate's evidence; the quick script is upstream's own
check, with its own timing engine (a ``time.perf_counter`` loop): its numbers are kept
(``artifacts/quick_benchmark.csv``, the log as upstream names it) and never compared
with the gate's (docs/protocol.md).  Its ``Check`` column is a hard gate: a FAIL row,
a non-zero exit or a CSV the pinned reader refuses stops the round."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from runner.core.errors import CampaignError, MeasurementFailed
from runner.core.files import write_atomic
from runner.core.prepare_lock import COMMAND_LOCK_ENV
from runner.core.spec import OUT_ENV
from runner.measure.host import run_job
from runner.round.context import BesideStartUp, RoundPlan, device_lock_file
from runner.store.upstream_quick import (
    QUICK_CSV,
    VALIDATION_LOG,
    failed_rows,
    load_record,
    read_quick_csv,
    take_edit,
)


def has_upstream_quick(rnd: RoundPlan) -> bool:
    return load_record(rnd.campaign.root) is not None


def device_lock_env(rnd: RoundPlan) -> dict[str, str]:
    """What tells the script's ``python`` to hold the device's preparation lock itself
    (``COMMAND_LOCK_ENV``): only where serving workers prepare on the device (a GPU
    target), else nothing."""
    if not BesideStartUp.possible(rnd):
        return {}
    return {COMMAND_LOCK_ENV: str(device_lock_file(rnd))}


class QuickCheck(BesideStartUp):
    """The candidate's quick script of a VALIDATE round (the module's docstring); the
    first timed turn raises its ``MeasurementFailed`` when it failed."""

    holds_device = False  # the script's own process holds the lock

    def __init__(self, rnd: RoundPlan, tree: Path) -> None:
        env = device_lock_env(rnd)

        def work() -> None:
            run_quick(rnd, tree, "candidate", VALIDATION_LOG, env)

        super().__init__(rnd, "upstream quick check", work)


def run_quick(
    rnd: RoundPlan,
    tree: Path,
    role: str,
    log_name: str,
    env: Mapping[str, str] | None = None,
    n: int | None = None,
) -> str:
    """Run the campaign's quick_test_bench.py on ``tree`` through the executor (``env``
    added to its job's); the log and the CSV go into the artifacts of round ``n`` (by
    default ``rnd``'s: a tournament names each entry's).  Returns the log text."""
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
    outcome = run_job(rnd, f"quick-{role}", spec, tree, env)
    log = outcome.out_dir / "test.log"
    text = (note + "\n" if note else "") + (log.read_text(encoding="utf-8") if log.exists() else "")
    artifacts = campaign.artifacts_dir(rnd.round if n is None else n)
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
