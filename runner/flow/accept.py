"""``campaign accept``: final acceptance of the lineage head (docs/protocol.md §1.4).

Four checks, each recorded, none skipped:

1. full validation: every target shape (and the held-out shapes) of the final best,
   paired against the base commit through the executor (A B B A turns of live
   workers locally, B C C B passes of fresh processes in containers and on Slurm), merged,
   scored and judged by the same gate as a round (more pairs when it asks);
2. the target's own full benchmark on the final code, stored apart as
   ``acceptance/artifacts/full_benchmark.csv`` (never compared with the quick CSV:
   another engine).  For the example target it is the worker at level full: full
   validation's final role already ran it on every shape (its workers' blocks together:
   short turns on a GPU target, the pinned timing's share elsewhere), so its merged CSV
   is kept as the benchmark with the timing its workers used (timed once; a pass at the
   pinned timing only where full validation did not complete); for a real target it is
   ``benchmark_command`` run in the
   head's worktree (its log is kept; the CSV it writes to
   ``$TURBO_CAMPAIGN_OUT/upstream_benchmark.csv`` is kept and mapped onto the pinned
   schema, else CSV lines it prints are extracted);
3. the target's full test suite in a fresh worktree of the head (worker test mode);
4. the optimisation branch: linear from base_commit, one ``[optimize] `` commit per
   accepted round, the branch (when committing) at the lineage head.

Nothing else uses the device while full validation times: on a GPU target with serving
workers its turns are short turns (``RoundPlan.short_turns``) and the full test suite runs
beside full validation, giving the device up at a test boundary whenever work is timed
(``runner.flow.suite_beside``; a suite that is not one pytest run holds the first
timed turn until it ends); elsewhere the steps run one after another.  The steps are
announced with the time left and recorded in seconds (``runner.flow.accept_steps``).
The outcome goes to ``acceptance/acceptance.md`` and ``acceptance/acceptance.json``;
the command exits 0 when ACCEPTED, 3 when NOT ACCEPTED, 2 on bad input.
"""

from __future__ import annotations

import shutil
from contextlib import ExitStack
from pathlib import Path

from runner.compare.loop import Comparison, measure_and_judge
from runner.compare.shapes import all_shapes
from runner.core.artifact_names import BENCHMARK_CSV
from runner.core.csv_io import read_csv
from runner.core.csv_schema import get_schema
from runner.core.device_memory import oom_error
from runner.core.errors import (
    CampaignError,
    ConfigError,
    DeviceOutOfMemory,
    MeasurementFailed,
    RoundOutOfOrder,
)
from runner.core.files import copy_plain_tree, write_atomic
from runner.core.limits import block_pairs, check_blocks
from runner.core.outcomes import GateResult, Score, Status
from runner.core.shapes import Shape, shapes_by_label
from runner.core.spec import load_spec
from runner.core.step_times import StepTime, StepTimes
from runner.core.timestamps import now_minute
from runner.executors.base import Executor
from runner.flow.accept_steps import ACCEPT_STEPS, INTEGRATION, StepClock, prior_seconds
from runner.flow.acceptance_checks import (
    benchmark_check,
    extract_csv,
    heldout_check,
    lineage_check,
    suite_check,
    validation_check,
)
from runner.flow.acceptance_record import Acceptance, Check, write_acceptance
from runner.flow.suite_beside import SuiteBeside
from runner.judge.scoring import score
from runner.measure.beside import NOTHING_BESIDE, BesideWork
from runner.measure.host import run_job
from runner.measure.passes import read_passes
from runner.measure.progress import Event
from runner.render.status import unclosed_rounds
from runner.round.build import built_roles
from runner.round.context import Progress, RoundPlan, open_round, run_command_in
from runner.round.tamper_check import proof
from runner.store.acceptance import FullBenchmarkInfo, FullSuiteInfo, acceptance_dir
from runner.store.campaign import Campaign
from runner.store.guard import locked, require_baseline
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, branch_name
from runner.store.sealed import heldout_labels
from runner.store.workspace import suite_command
from runner.targets.upstream_csv import BENCH_CSV_NAME, to_pinned, upstream_targets

ACCEPT_ROUND = 0  # the spec's round number: acceptance is not a round


def now() -> str:
    return now_minute()


# ---- shapes --------------------------------------------------------------------------
def acceptance_shapes(
    m: Manifest, heldout: list[str] | None = None
) -> tuple[list[Shape], list[str]]:
    """Every target shape, then the held-out shapes (``heldout``: the sealed pick's
    labels, ``runner.store.sealed.heldout_labels``; else the manifest's); and the
    held-out labels."""
    shapes = all_shapes(m)
    have = {s.label for s in shapes}
    labels = m.heldout_shapes if heldout is None else heldout
    listed = shapes_by_label(m.shape_set, labels, "heldout_shapes", "; fix manifest.yaml")
    extra = [s for s in listed if s.label not in have]
    return shapes + extra, [s.label for s in listed]


# ---- 1. full validation ------------------------------------------------------------------
ACCEPT_COMPARISON = Comparison(
    roles=("baseline", "final"),
    files=("baseline.csv", "final.csv"),
    broken="the base commit FAILed a correctness check on the full shape set",
    audits=False,
)


def full_validation(
    rnd: RoundPlan,
    trees: dict[str, Path],
    shapes: list[Shape],
    blocks: int,
    beside: BesideWork = NOTHING_BESIDE,
) -> tuple[GateResult, Score, Score]:
    """Base ("baseline") against head ("final") through the rounds' measure-and-judge
    path: ``block_pairs(blocks)`` paired samples, more when the gate asks for them; under the
    rounds' proof that each role ran its own files (``Tampered``: exit 6).  ``beside``:
    the full suite beside it, where it runs there (``SuiteBeside``)."""
    with proof(rnd, trees) as proven:
        samples = block_pairs(blocks)
        got = measure_and_judge(
            rnd, trees, shapes, samples, how=ACCEPT_COMPARISON, beside=beside + proven
        )
    return got.gate, got.reference, got.candidate


# ---- 2. the target's full benchmark --------------------------------------------------
def full_benchmark(
    rnd: RoundPlan, tree: Path, shapes: list[Shape], dest: Path, measured: Path | None = None
) -> FullBenchmarkInfo:
    """The target's full benchmark on the head, its CSV stored at ``dest``.  For the
    example target that benchmark is the worker at level full with the campaign's
    pinned timing, which is what full validation's final role ran on every shape:
    its merged CSV (``measured``, when full validation completed) is that benchmark's
    result, every shape's correctness checked by each of its workers before and after
    timing, and is not timed a second time.  A real target's own benchmark command is
    another engine and always runs, after full validation."""
    m = rnd.manifest
    if rnd.target.name == "example":
        if measured is not None and measured.is_file():
            return _measured_benchmark(rnd, measured, dest)
        return _example_full_benchmark(rnd, tree, shapes, dest)
    return _command_full_benchmark(rnd, tree, m.benchmark_command, dest, upstream_targets(shapes))


def _measured_benchmark(rnd: RoundPlan, measured: Path, dest: Path) -> FullBenchmarkInfo:
    shutil.copy2(measured, dest)
    csv_score = score(read_passes([dest], None)[0], rnd.manifest.primary_metric)
    return {
        "command": f"none: full validation's {measured.name} (level full, not timed again)",
        "engine": "runner worker, level full: full validation's final role, its paired "
        "samples merged; each worker checked every shape's correctness before and after "
        "timing",
        "timing": _final_role_timing(rnd),
        "returncode": 0,
        "csv": dest.name,
        "fail": csv_score.n_fail,
        "from_full_validation": True,
    }


def _final_role_timing(rnd: RoundPlan) -> dict[str, object]:
    """The timing the final role's workers ran with (one block's share of the pinned
    timing, a short turn on a GPU target: ``runner.measure.paired.block_timing``), read
    from the first such worker's spec; the pinned timing where none is found."""
    for path in sorted((rnd.tmp / "specs").glob("pass-*-final*.json")):
        try:
            return load_spec(path).timing.to_dict()
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return rnd.template.timing.to_dict()


def _example_full_benchmark(
    rnd: RoundPlan, tree: Path, shapes: list[Shape], dest: Path
) -> FullBenchmarkInfo:
    spec = rnd.template.for_pass("full-benchmark", 0, shapes)
    outcome = run_job(rnd, "full-benchmark", spec, tree)
    info: FullBenchmarkInfo = {
        "command": "python -m runner.worker artifacts/passes/specs/full-benchmark.json "
        "artifacts/passes/full-benchmark (in a worktree of the head; level full, the "
        "campaign's pinned timing)",
        "engine": "runner worker, level full",
        "timing": spec.timing.to_dict(),
        "returncode": outcome.returncode,
        "csv": None,
    }
    oom = oom_error(outcome.out_dir, "full-benchmark", outcome.log_path)
    if oom is not None:
        raise oom  # the device's capacity, never a FAIL row of the code under test
    if outcome.ok:
        shutil.copy2(outcome.out_dir / BENCHMARK_CSV, dest)
        info["csv"] = str(dest.name)
        csv_score = score(read_passes([dest], None)[0], rnd.manifest.primary_metric)
        info["fail"] = csv_score.n_fail
    return info


def _command_full_benchmark(
    rnd: RoundPlan, tree: Path, command: str, dest: Path, targets: list[Shape] | None = None
) -> FullBenchmarkInfo:
    """``command`` in the head's worktree.  A Primus-Turbo training benchmark writes its
    CSV to ``$TURBO_CAMPAIGN_OUT/upstream_benchmark.csv`` (its ``--output``): that file
    is kept as written and mapped onto the pinned schema (with ``targets``: their rows
    under their labels, a target without a row named in ``csv_error``); a command that
    writes no such file is read for the CSV lines it prints instead."""
    code, log, out_dir = run_command_in(rnd, "full-benchmark", tree, command)
    write_atomic(dest.parent / "full_benchmark.log", log)
    info: FullBenchmarkInfo = {
        "command": command,
        "engine": "the target's own benchmark",
        "returncode": code,
        "csv": None,
        "log": "full_benchmark.log",
        "fail": 0,
    }
    written = out_dir / BENCH_CSV_NAME
    if written.is_file():
        raw = dest.parent / BENCH_CSV_NAME
        shutil.copy2(written, raw)
        info["upstream_csv"] = raw.name
        try:
            pinned, skipped = to_pinned(
                written.read_text(encoding="utf-8"), rnd.manifest.csv_schema, targets
            )
            write_atomic(dest, pinned)
            rows = read_csv(dest, get_schema(rnd.manifest.csv_schema)).rows
            info["fail"] = sum(1 for r in rows if not r.passed)
        except CampaignError as exc:
            info["csv_error"] = str(exc)
            return info
        info.update({"csv": dest.name, "skipped": skipped})
        return info
    text, fail = extract_csv(log)
    if text is not None:
        write_atomic(dest, text)
        info.update({"csv": dest.name, "fail": fail})
    return info


# ---- 3. the full test suite ------------------------------------------------------------
def full_suite_command(rnd: RoundPlan, tree: Path) -> str:
    """The full test suite as it runs in ``tree``: the campaign's own
    (``init --suite-command``), else the target's, its paths moved where the tree
    holds upstream's tests (``runner.store.workspace.suite_command``)."""
    return suite_command(rnd.manifest.suite_command or rnd.target.full_suite_command(), tree)


def full_suite(
    rnd: RoundPlan, tree: Path, command: str, dest: Path, env: dict[str, str] | None = None
) -> FullSuiteInfo:
    code, log, _ = run_command_in(rnd, "full-suite", tree, command, env=env)
    write_atomic(dest, log)
    return {"command": command, "returncode": code, "log": dest.name, "tail": log[-1500:]}


# ---- the whole acceptance -----------------------------------------------------------------
def run_acceptance(
    campaign: Campaign,
    executor: Executor,
    *,
    passes: int = 2,
    progress: Progress = print,
    gpus: tuple[int, ...] = (),
) -> Acceptance:
    """Final acceptance of the lineage head; writes ``acceptance/`` and returns it."""
    check_blocks(passes, "--passes")  # 1 to MAX_BLOCKS paired blocks; 2 is the default
    times = StepTimes()  # from the start: the checks below are its time too
    with locked(campaign, progress):
        _refuse_unready(campaign)
        m = campaign.manifest
        lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
        shapes, heldout = acceptance_shapes(m, heldout_labels(campaign.root, m))
        result = Acceptance(
            campaign.name,
            now(),
            base_commit=m.base_commit or "",
            head=lineage.head(),
            passes=passes,
            shapes=[s.label for s in shapes],
            heldout=heldout,
        )
        accepted = [r.commit for r in campaign.results() if r.status is Status.ACCEPTED]
        check, result.commits = lineage_check(lineage, m, accepted)
        out = _fresh_dir(acceptance_dir(campaign))
        steps = ACCEPT_STEPS + ((INTEGRATION,) if m.execution_mode == "workspace" else ())
        prior = prior_seconds(out / "acceptance.json")
        clock = StepClock(_prefixed(progress), f"round-{ACCEPT_ROUND}", steps, prior)
        times.add(StepTime("checks before the round", 0.0, times.now()))
        with open_round(
            campaign,
            executor,
            _prefixed(progress),
            ACCEPT_ROUND,
            "full",
            gpus,
            acceptance=True,
            times=times,
        ) as rnd:
            try:
                _measure(rnd, lineage, result, shapes, out / "artifacts", clock)
            finally:
                result.step_seconds = dict(clock.seconds)
                result.step_times = times.finish()
            _keep_passes(rnd.tmp, out / "artifacts")
        result.checks.append(check)
        result.finished = now()
        write_acceptance(out, result)
        return result


def _refuse_unready(campaign: Campaign) -> None:
    require_baseline(campaign)
    open_rounds = unclosed_rounds(campaign)
    if open_rounds:
        n = open_rounds[0]
        raise RoundOutOfOrder(
            f"round-{n} of {campaign.name} is not closed (no result.json): close it with "
            f"`campaign validate --round {n}` before final acceptance"
        )
    if not campaign.manifest.base_commit:
        raise ConfigError("manifest has no base_commit; re-create the campaign")


def _fresh_dir(out: Path) -> Path:
    """``acceptance/`` with an empty ``artifacts/`` (a re-run replaces the last one)."""
    shutil.rmtree(out / "artifacts", ignore_errors=True)
    (out / "artifacts").mkdir(parents=True)
    return out


def _prefixed(progress: Progress) -> Progress:
    def say(msg: str) -> None:
        if isinstance(msg, Event) and msg.label == f"round-{ACCEPT_ROUND}":
            progress(msg.relabel("accept"))
        else:
            progress(msg.replace(f"round-{ACCEPT_ROUND}: ", "accept: ", 1))

    return say


def _measure(
    rnd: RoundPlan,
    lineage: Lineage,
    result: Acceptance,
    shapes: list[Shape],
    art: Path,
    clock: StepClock,
) -> None:
    """Checks 1-3 in fresh worktrees of the base commit and the head.  Nothing else
    uses the device while full validation times: on a GPU target with serving workers
    the full test suite runs beside it (``SuiteBeside``: a pytest suite gives the device
    up whenever work is timed, another suite holds the first turn until it is done),
    elsewhere after full validation; the full benchmark comes after full validation,
    the suite paused while it times."""
    with ExitStack() as stack:
        with clock.step("worktrees and builds"):
            with rnd.times.step("worktrees"):
                base = stack.enter_context(lineage.worktree(result.base_commit))
                head = stack.enter_context(lineage.worktree(result.head))
            trees = {"baseline": base, "final": head}
            built = stack.enter_context(built_roles(rnd, trees))
        rnd = built.plan  # every job from here on runs on its role's build

        # paths moved by the base commit's record: the head cannot narrow its own suite
        command = full_suite_command(rnd, base)

        def suite(env: dict[str, str] | None = None) -> None:
            result.full_suite = full_suite(rnd, head, command, art / "full_suite.log", env)

        beside: SuiteBeside | None = None
        with clock.step("full validation"):
            if SuiteBeside.possible(rnd):
                folder = rnd.tmp / "full-suite" / "yield"
                beside = stack.enter_context(SuiteBeside(rnd, command, folder, suite))
            work = beside.beside_work if beside is not None else NOTHING_BESIDE
            result.checks.append(_validate(rnd, trees, shapes, result, art, work))
        measured = art / "final.csv" if result.final is not None else None
        with clock.step("full benchmark"):
            dest = art / "full_benchmark.csv"
            # a command's benchmark times: the suite gives the device up
            with work.quiet(), rnd.times.step("full benchmark"):
                result.full_benchmark = full_benchmark(rnd, head, shapes, dest, measured)
            result.checks.append(benchmark_check(result.full_benchmark))
        with clock.step("full test suite"):
            if beside is None:
                with rnd.times.step("full-suite"):
                    suite()
            else:  # what is left of it after full validation
                with rnd.times.step("wait for the full suite"):
                    beside.close()
                    beside.wait()
                result.full_suite.update(beside.record())
            result.checks.append(suite_check(result.full_suite))
        if rnd.manifest.execution_mode == "workspace":
            with clock.step(INTEGRATION):
                result.checks.append(_integration(rnd, head, result, art / "integration.log"))


def _integration(rnd: RoundPlan, head: Path, result: Acceptance, log: Path) -> Check:
    """Workspace mode: the integration gate in the full repository (sync back, build,
    upstream focused test); its result is committed upstream only when every other
    check passed too."""
    from runner.flow.workspace_mode import integration_gate

    try:
        ok, detail, commit = integration_gate(rnd, head, log)
    except CampaignError as exc:
        return Check("integration (full repository)", False, str(exc))
    if ok and commit is not None and all(c.ok for c in result.checks):
        detail += "; " + commit()
    return Check("integration (full repository)", ok, detail)


def _validate(
    rnd: RoundPlan,
    trees: dict[str, Path],
    shapes: list[Shape],
    result: Acceptance,
    art: Path,
    beside: BesideWork,
) -> Check:
    try:
        gate, base, final = full_validation(rnd, trees, shapes, result.passes, beside)
    except DeviceOutOfMemory:
        raise  # infrastructure (exit 6 with the figure), not a verdict on the code
    except MeasurementFailed as exc:
        return Check("full validation", False, f"did not complete: {exc.message}")
    result.gate, result.baseline, result.final = gate, base, final
    for name in ("baseline.csv", "final.csv"):
        shutil.copy2(rnd.tmp / name, art / name)
    check = validation_check(gate, final)
    work = {s.label: s.flops_fwd for s in shapes}
    held = heldout_check(base, final, result.heldout, work, gate)
    if held is not None:
        result.checks.append(held)
    if result.head == result.base_commit:
        check.ok = False
        check.detail = "no round was accepted: the final best is the base commit; " + check.detail
    return check


def _keep_passes(tmp: Path, art: Path) -> None:
    """Every pass's folder, the paired sessions' memory reports (``memory*.json``: what
    the workers held against the op's figure, ``runner.measure.paired``) and their turns
    (``turns*.jsonl``: when each worker timed), as a round keeps them."""
    for sub in sorted(tmp.iterdir()):
        if sub.is_dir():
            copy_plain_tree(sub, art / "passes" / sub.name)
        elif sub.suffix in (".json", ".jsonl") and sub.name.startswith(("memory", "turns")):
            shutil.copy2(sub, art / sub.name)
