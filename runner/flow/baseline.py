"""Round-1, the baseline: full validation over every target shape in several fresh
processes, noise calibration (sigma_G), held-out and representative shapes, the
generated quick script and its log, the kernel snapshot and the records."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

from runner.compare.loop import measure_roles
from runner.compare.shapes import all_shapes
from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.csv_schema import BenchCSV, Row
from runner.core.errors import (
    ConfigError,
    FocusedTestFailed,
    MeasurementFailed,
    RoundOutOfOrder,
    ValueRefused,
)
from runner.core.limits import MAX_BASELINE_PASSES
from runner.core.outcomes import RoundResult, Status
from runner.core.shapes import Shape
from runner.core.spec import OUT_ENV
from runner.core.stats import rel_stdev
from runner.executors.base import Executor
from runner.flow.empirical_peak import measure_empirical_peak
from runner.flow.quickscript import write_quick_script
from runner.judge.gate import calibrate_sigma
from runner.judge.gate_constants import current_digest
from runner.judge.memory_fit import refuse_unfit
from runner.judge.representative import BaselineRow, choose_heldout, select_representative
from runner.judge.scoring import score
from runner.measure.host import run_job
from runner.measure.passes import per_pass_metric, read_passes, shape_seconds, write_merged
from runner.round.build import built_roles, describe
from runner.round.context import FocusedTest, Progress, RoundPlan, open_round
from runner.round.kernel_facts import FactsJob
from runner.round.logs import close_round
from runner.round.result import attach_facts, now
from runner.round.upstream_quick import has_upstream_quick, run_quick
from runner.store.campaign import Campaign
from runner.store.gate_ledger import LEDGERED_NOTE
from runner.store.gate_ledger import record as record_gate_fields
from runner.store.guard import locked
from runner.store.lineage import snapshot
from runner.store.manifest import Manifest, validate_manifest
from runner.store.roundfiles import ATTEMPTS, artifact_list, list_attempts, store_artifacts
from runner.store.sealed import is_sealed
from runner.store.stack_platform import platform_line
from runner.store.upstream_quick import BASELINE_LOG, fill_shapes

MIN_SIGMA = 1e-6  # a calibrated sigma_G never below this: the gate divides by it


def run_baseline(
    campaign: Campaign,
    executor: Executor,
    *,
    passes: int = 5,
    progress: Progress = print,
    gpus: Sequence[int] = (),
) -> RoundResult:
    """Round-1: full validation over every target shape in ``passes`` fresh processes,
    noise calibration, representative shapes, the quick script, records."""
    if not 2 <= passes <= MAX_BASELINE_PASSES:
        raise ValueRefused(
            f"--passes {passes}: the baseline needs at least 2 passes to calibrate noise "
            f"and at most {MAX_BASELINE_PASSES} (use 5); nothing was measured"
        )
    with locked(campaign, progress):
        if campaign.closed_rounds():
            raise RoundOutOfOrder(
                f"campaign {campaign.name} already has a baseline; the next round is "
                f"{campaign.next_round()}: campaign validate --round {campaign.next_round()}"
            )
        m = campaign.manifest
        if not m.base_commit:
            raise ConfigError("manifest has no base_commit; re-create the campaign")
        refuse_unfit(m.target_op, all_shapes(m), m.target_gpu, "campaign baseline")
        started = now()
        _clear_interrupted(campaign.round_dir(1))
        with open_round(campaign, executor, progress, 1, "full", gpus) as rnd:
            return _baseline_in(rnd, passes, started)


def _baseline_in(rnd: RoundPlan, passes: int, started: str) -> RoundResult:
    """The baseline under its lineage start: if it fails before it is closed, the chain
    head and the branch it created are removed again (nothing left in the source)."""
    with rnd.lineage.starting(rnd.manifest.base_commit or ""):
        return _measure_baseline(rnd, passes, started)


def _heldout(m: Manifest, shapes: list[Shape]) -> list[str]:
    """The held-out labels the manifest lists after the baseline: its own; none for a
    sealed pick (``runner.store.sealed``: no target, nothing to choose nor exclude);
    else, for a campaign made with none, chosen among the measured shapes."""
    if m.heldout_shapes or is_sealed(m):
        return list(m.heldout_shapes)
    return choose_heldout({s.label: s.flops_fwd for s in shapes})


def _measure_baseline(rnd: RoundPlan, passes: int, started: str) -> RoundResult:
    m, campaign = rnd.manifest, rnd.campaign
    with rnd.lineage.worktree(m.base_commit or "") as tree:
        facts_job = FactsJob(rnd, {"incumbent": tree})  # the base: round 2's incumbent
        result = _measured_base(rnd, tree, passes, started)  # a failure: not waited for
        with rnd.times.step("empirical peak"):  # after every timed pass
            result.reasons.extend(measure_empirical_peak(rnd, tree))
        with rnd.times.step("wait for the kernel facts"):
            facts = facts_job.result()  # while the tree exists
    attach_facts(rnd, result, facts)
    close_round(campaign, result, progress=rnd.step, times=rnd.times)
    return result


def _measured_base(rnd: RoundPlan, tree: Path, passes: int, started: str) -> RoundResult:
    """The baseline's measurement, calibration and artifacts; its record, not yet closed."""
    m, campaign, shapes = rnd.manifest, rnd.campaign, all_shapes(rnd.manifest)
    with built_roles(rnd, {"baseline": tree}) as built:  # its jobs: on the base's build
        paths = _measured(built.plan, tree, shapes, passes)
        with rnd.times.step("calibration"):
            csvs = read_passes(paths, None)
            merged = write_merged(rnd.tmp / BENCHMARK_CSV, csvs)
            base_score = score(merged, m.primary_metric)
            per_pass = per_pass_metric(csvs, base_score.metric)
            _refuse_unmeasured(rnd, shapes, paths, csvs, per_pass)
            sigma_g, _ = calibrate_sigma(per_pass)
            heldout = _heldout(m, shapes)
            rep = _representative(m, merged, per_pass, exclude=set(heldout))
        campaign.manifest = validate_manifest(
            {
                **m.model_dump(),
                "pinned_header": merged.header,
                "representative_shapes": rep,
                "heldout_shapes": heldout,
                "sigma_g": max(sigma_g, MIN_SIGMA),
                "shape_seconds": shape_seconds(paths),
            },
            "baseline",
        )
        with rnd.times.step("quick script"):
            extra = _quick_run(built.plan, tree, shapes)
        snapshot(tree, m.kernel_source, campaign.snapshot_dir(1))
    with rnd.times.step("store artifacts"):
        store_artifacts(campaign, 1, rnd.tmp, extra=extra)
    campaign.save_manifest()
    ledgered = record_gate_fields(campaign, "baseline", "fixed at the baseline")
    result = RoundResult(
        round=1,
        status=Status.BASELINE,
        level="full",
        hypothesis="Baseline: no code changed; measure the base commit.",
        change="none (baseline: no code changed)",
        description="baseline",
        started=started,
        finished=now(),
        test_command=m.test_command,
        benchmark_command=m.benchmark_command,
        score=base_score,
        baseline=base_score,
        best=None,
        reasons=[
            f"noise calibration over {passes} passes: sigma_G = {100 * sigma_g:.3f}%",
            *([describe(built.roles)] if built.roles else []),
            f"{LEDGERED_NOTE} (sha256 {ledgered[:12]}): a change goes through `campaign set`",
        ],
        artifacts=artifact_list(campaign, 1),
        attribution="No code changed; the baseline is the reference for every later round.",
        next_direction="Profile the representative shapes and state the first hypothesis.",
        key_finding=f"sigma_G {100 * sigma_g:.3f}%; representative: {', '.join(rep)}",
        commit=m.base_commit,
        gate_constants=current_digest(),
        platform=platform_line(Path(m.source)),
    )
    return result


def _clear_interrupted(round_dir: Path) -> None:
    """Remove what an interrupted baseline attempt left in ``round_dir``, but keep the
    evidence of earlier failed attempts (``attempts/``): a retry never erases it."""
    if not round_dir.is_dir():
        return
    for entry in round_dir.iterdir():
        if entry.name == ATTEMPTS:
            continue
        if entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _refuse_unmeasured(
    rnd: RoundPlan,
    shapes: Sequence[Shape],
    paths: Sequence[Path],
    csvs: Sequence[BenchCSV],
    per_pass: Sequence[dict[str, float]],
) -> None:
    """Every target needs a usable (PASS) figure in every pass, else noise cannot be
    calibrated: the passes' CSVs and logs are kept under ``rounds/round-1/attempts/``
    and the error names each target with what the passes recorded for it."""
    missing = [s.label for s in shapes if not all(s.label in p for p in per_pass)]
    if not missing:
        return
    dest = _keep_passes(rnd.campaign.round_dir(1), paths)
    seen = {row.label: row for csv in csvs for row in csv.rows}
    lines = [f"  {label}: {_what_was_recorded(seen.get(label))}" for label in missing]
    raise MeasurementFailed(
        f"the baseline measured {len(shapes) - len(missing)} of {len(shapes)} target shapes "
        f"in every pass; these have no usable figure:\n" + "\n".join(lines) + "\n"
        f"the passes' CSVs and logs are kept in {dest}: read them, fix the cause "
        "(a failing check is the kernel's or the stack's), then run `campaign baseline` again"
    )


def _what_was_recorded(row: Row | None) -> str:
    if row is None:
        return "no row in the pass's CSV"
    cells = ", ".join(f"{k}={v}" for k, v in row.values.items() if k != "label")
    return f"check {row.check} ({cells})"


def _keep_passes(round_dir: Path, paths: Sequence[Path]) -> Path:
    """Copy each pass's folder (its CSV and samples) and the round's logs into a new
    ``attempts/attempt-K``; returns that folder."""
    k = len(list_attempts(round_dir)) + 1
    dest = round_dir / ATTEMPTS / f"attempt-{k}"
    for path in paths:
        shutil.copytree(path.parent, dest / path.parent.name, dirs_exist_ok=True)
    tmp = paths[0].parent.parent if paths else None
    for log in sorted(tmp.glob("*.log")) if tmp is not None else []:
        shutil.copy2(log, dest / log.name)
    return dest


def _measured(rnd: RoundPlan, tree: Path, shapes: list[Shape], passes: int) -> list[Path]:
    """The focused test (beside the workers' start-up on a GPU target), then the
    baseline's passes; a failing test stops the command."""
    failed = "the focused test fails on the base commit:\n"
    with FocusedTest(rnd, "baseline", tree) as test:
        if test.done and not test.wait():
            raise ConfigError(failed + test.tail)
        try:
            trees = {"baseline": tree}
            got = measure_roles(rnd, trees, shapes, passes, beside=test.beside_work)
            return got["baseline"]
        except FocusedTestFailed as exc:
            raise ConfigError(failed + exc.tail) from None


def _representative(
    m: Manifest, merged: BenchCSV, per_pass: list[dict[str, float]], exclude: set[str]
) -> list[str]:
    shapes = {s.label: s for s in all_shapes(m)}
    rows: list[BaselineRow] = []
    for row in merged.rows:
        if row.label in exclude:
            continue
        values = [p[row.label] for p in per_pass if row.label in p]
        rows.append(
            {
                "label": row.label,
                "check": row.check,
                "flops": shapes[row.label].flops_fwd,
                "rel_std": rel_stdev(values),
                "distribution": shapes[row.label].params.get("distribution"),
            }
        )
    grouped = m.target_op.startswith("grouped_gemm")
    return select_representative(rows, grouped=grouped)


def _quick_run(rnd: RoundPlan, tree: Path, shapes: list[Shape]) -> dict[str, str]:
    """The campaign's quick script on the baseline tree.  Upstream's template (copied at
    init): SHAPES filled with every target shape and run (a FAIL row stops the
    baseline), then narrowed to the representative shapes for the VALIDATE rounds.
    Otherwise the generated script, run once.  Returns the extra artifacts."""
    campaign = rnd.campaign
    if not has_upstream_quick(rnd):
        write_quick_script(campaign)
        return {BASELINE_LOG: _quick_baseline(rnd, tree)}
    script = campaign.quick_script
    fill_shapes(campaign.root, script, [_upstream_shape(s) for s in shapes])
    log = run_quick(rnd, tree, "baseline", BASELINE_LOG)
    rep = set(rnd.campaign.manifest.representative_shapes)
    fill_shapes(campaign.root, script, [_upstream_shape(s) for s in shapes if s.label in rep])
    return {BASELINE_LOG: log}


def _upstream_shape(shape: Shape) -> dict[str, object]:
    return {"label": shape.label, "M": shape.m, "N": shape.n, "K": shape.k}


def _quick_baseline(rnd: RoundPlan, tree: Path) -> str:
    """Run the generated quick script on the baseline tree; its output is the log."""
    m = rnd.manifest
    script = rnd.campaign.quick_script
    # The script travels in the spec: a container sees neither the campaign folder nor
    # a writable source tree, so it runs from (and writes into) the job's out dir.
    spec = rnd.template.for_pass(
        "baseline",
        0,
        [],
        mode="test",
        command=f'python "${OUT_ENV}/{script.name}" --summary-csv "${OUT_ENV}/quick.csv"',
        files={script.name: script.read_text(encoding="utf-8")},
    )
    outcome = run_job(rnd, "quick-baseline", spec, tree)
    log = outcome.out_dir / "test.log"
    text = log.read_text(encoding="utf-8") if log.exists() else ""
    if outcome.returncode != 0:
        raise MeasurementFailed(f"the quick script failed on the baseline ({m.quick_command})", log)
    return text
