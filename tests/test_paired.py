"""Paired, turn-taking workers (runner.measure.paired, runner.worker.bench.serve) and the one
measure path (runner.compare.loop): the schedule, the pair rule the gate exports,
real serving workers on the CPU taking turns, a failing worker, and sharding over 8
simulated devices with the split by measured seconds and the merge."""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from campaign_helpers import slow_suite

from runner.compare.entries import Entry
from runner.compare.loop import ROUND_CAP_ENV, measure_roles
from runner.compare.shapes import level_shapes
from runner.core.csv_io import read_csv
from runner.core.device_memory import MemoryLog, ShapeMemory, WorkerMemory
from runner.core.errors import (
    ConfigError,
    DeviceOutOfMemory,
    FocusedTestFailed,
    MeasurementFailed,
    WorkerCrashed,
)
from runner.core.outcomes import Decision, Score, ShapeScore
from runner.core.prepare_lock import DeviceLock, lock_path
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, load_spec
from runner.executors.local import LocalExecutor
from runner.flow.entry_tests import EntryTests
from runner.flow.suite_beside import SuiteBeside
from runner.judge.gate import decide, required_pairs
from runner.judge.probe import is_probe
from runner.measure.beside import BesideWork
from runner.measure.host import PlainHost, PlainManifest, run_job
from runner.measure.host_records import RECORDS_DIR, rewritten
from runner.measure.paired import (
    QUICK_TURN,
    READY_TIMEOUT_ENV,
    TURN_TIMEOUT_ENV,
    _order,
    _picks,
    block_timing,
    crash_signal,
    launch_notes,
    measure_paired,
    supports_paired,
)
from runner.measure.sharding import (
    failed_worker,
    flops_cost,
    seconds_cost,
    shard_shapes,
)
from runner.measure.waves import pool_members, wave_size
from runner.round.context import BesideStartUp, FocusedTest, RoundPlan
from runner.round.result import Request
from runner.store.campaign import Campaign

TIMING = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=3, budget_s=0.05, batch_s=0.005)
ENV = {"TURBO_KERNELS_GEMM_BACKEND": "TORCH"}


# ---- the rule and the schedule ---------------------------------------------------------
def test_required_pairs_is_the_gate_s_own_rule() -> None:
    assert required_pairs(None) == 3 and required_pairs(0.005) == 3
    assert required_pairs(0.0101) == 5 and required_pairs(0.02, min_pairs=7) == 7
    with pytest.raises(Exception, match="min_pairs"):
        required_pairs(0.01, min_pairs=0)
    best = Score("m", 100.0, (ShapeScore("a", "PASS", 100.0),), 1, 0)
    cand = Score("m", 100.5, (ShapeScore("a", "PASS", 100.5),), 1, 0)
    for sigma in (0.002, 0.02):
        gate = decide(best, cand, sigma_g=sigma)
        assert gate.decision is Decision.NEEDS_REMEASURE
        assert gate.more_pairs == required_pairs(sigma)
        assert f"measure {required_pairs(sigma)} fresh" in gate.reasons[0]


def test_block_order_and_pool_walk() -> None:
    assert _order(["a", "b"]) == (0, 1, 1, 0)
    assert _order(["a", "b", "c"]) == (0, 1, 2, 2, 1, 0)
    assert _order(["a"]) == (0,)
    picks = _picks(3, 8, 4, seed=5)
    for walk in picks:  # every member before any repeats
        assert sorted(walk[:4]) == [0, 1, 2, 3] and sorted(walk[4:]) == [0, 1, 2, 3]
    assert _picks(3, 8, 4, seed=5) == picks and _picks(3, 8, 4, seed=6) != picks
    half = block_timing(TimingSettings(warmup_s=0.3, budget_s=5.0, repeats=5, max_repeats=30), 2)
    assert (half.warmup_s, half.budget_s, half.max_repeats, half.repeats) == (0.15, 2.5, 15, 5)
    short = block_timing(TimingSettings(warmup_s=0.1, budget_s=0.4), 2)
    assert (short.warmup_s, short.budget_s) == (0.1, 0.2)  # the floor: re-warm every turn
    # A quick round on a GPU: short turns, never longer than the pinned share.
    pinned = TimingSettings(warmup_s=0.3, budget_s=5.0, repeats=5, max_repeats=30)
    quick = block_timing(pinned, 2, short=True)
    got = (quick.warmup_s, quick.budget_s, quick.repeats, quick.max_repeats, quick.batch_s)
    assert got == (0.05, 0.16, 3, 8, 0.02)
    assert block_timing(short, 1, short=True).budget_s == 0.16
    tiny = TimingSettings(warmup_s=0.01, budget_s=0.05, repeats=2, max_repeats=3, batch_s=0.005)
    assert block_timing(tiny, 2, short=True) == block_timing(tiny, 2)


def test_quick_gpu_rounds_start_every_pair_the_gate_may_ask_for() -> None:
    from types import SimpleNamespace

    from runner.compare.loop import first_samples
    from runner.executors.slurm import SlurmExecutor

    def rnd(level: str, gpu: bool, executor: object, sigma: float) -> SimpleNamespace:
        manifest = SimpleNamespace(sigma_g=sigma)
        quick_gpu = level == "quick" and gpu
        return SimpleNamespace(quick_gpu=quick_gpu, executor=executor, manifest=manifest)

    local = LocalExecutor()
    assert first_samples(rnd("quick", True, local, 0.012), 2) == 5  # volatile: 5 pairs
    assert first_samples(rnd("quick", True, local, 0.004), 2) == 3
    assert first_samples(rnd("quick", True, local, 0.004), 4) == 4
    assert first_samples(rnd("quick", True, local, 0.012), 2, remeasure=False) == 2
    assert first_samples(rnd("full", True, local, 0.012), 2) == 2  # full: ask when needed
    assert first_samples(rnd("quick", False, local, 0.012), 2) == 2  # CPU campaign
    slurm = SlurmExecutor.__new__(SlurmExecutor)  # one pass per worker: no serving
    assert first_samples(rnd("quick", True, slurm, 0.012), 2) == 2


def test_seconds_cost_balances_by_measured_time() -> None:
    shapes = [Shape(f"s{i}", 64 * (i + 1), 64, 64) for i in range(8)]
    # FLOPs would give the largest shape a GPU of its own; measured seconds say the
    # small shapes cost the most (a timing budget each, compile first).
    seconds = {f"s{i}": 10.0 - i for i in range(8)}
    by_time = shard_shapes(shapes, 2, cost=seconds_cost(seconds))
    loads = [sum(seconds[s.label] for s in shard) for shard in by_time]
    assert loads == [26.0, 26.0]
    assert shard_shapes(shapes, 2, cost=seconds_cost({})) == shard_shapes(shapes, 2)
    assert seconds_cost({"s0": 3.0})(shapes[5]) == 3.0  # unknown: the typical one
    assert seconds_cost({}) is flops_cost


# ---- real serving workers (CPU) --------------------------------------------------------
def example_host(
    tmp_path: Path, *, pool: int | None = None, wave_pairs: int | None = None
) -> tuple[PlainHost, Path]:
    import runner.cli  # noqa: F401  (newcampaign imported first hits an import cycle)
    from runner.flow.new_campaign import fresh_example_copy

    tree = fresh_example_copy(tmp_path / "tree")
    options = {"backend": "TORCH", "granularity": None}
    template = RoundSpec(
        "paired-test",
        2,
        "incumbent",
        0,
        "full",
        "example",
        "gemm",
        options,
        (),
        TIMING,
        device="cpu",
        pool=pool,
        wave_pairs=wave_pairs,
    )
    host = PlainHost(
        tmp_path / "round", LocalExecutor(), template, lambda t: {"PYTHONPATH": str(t), **ENV}
    )
    return host, tree


def alive(marker: Path) -> list[str]:
    """Command lines of running processes that mention ``marker``."""
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True)
    return [line for line in out.stdout.splitlines() if str(marker) in line]


class Beside:
    """Work beside a measurement that notes when the engine called on it: its wait, its
    ready check, and each stretch it was told to keep quiet."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []
        self.quiet_spans: list[tuple[float, float]] = []

    @contextlib.contextmanager
    def quiet(self) -> Iterator[None]:
        start = time.time()
        yield
        self.quiet_spans.append((start, time.time()))

    def work(self) -> BesideWork:
        def wait() -> None:
            self.calls.append(("wait", time.time()))

        def check() -> None:
            self.calls.append(("check", time.time()))

        return BesideWork(waits=(wait,), ready_checks=(check,), quiets=(self.quiet,))

    def quiet_at(self, moment: float) -> bool:
        return any(start <= moment <= end for start, end in self.quiet_spans)


@pytest.mark.integration
def test_serving_workers_take_turns_abba(tmp_path: Path) -> None:
    host, tree = example_host(tmp_path, pool=3)
    shapes = [Shape("s1", 16, 64, 64), Shape("s2", 32, 64, 64)]
    trees = {"incumbent": tree, "candidate": tree}
    beside = Beside()
    roles = ["incumbent", "candidate"]
    got = measure_paired(host, trees, shapes, roles, pairs=2, groups=2, beside=beside.work())
    assert [p.parent.name for p in got["incumbent"]] == ["pass-01-incumbent", "pass-03-incumbent"]
    assert [p.parent.name for p in got["candidate"]] == ["pass-02-candidate", "pass-04-candidate"]
    for paths in got.values():
        for path in paths:
            csv = read_csv(path)
            assert csv.labels() == ["s1", "s2"] and all(r.passed for r in csv.rows)
            samples = json.loads((path.parent / "samples.json").read_text())
            blocks = samples["shapes"]["s1"]["forward"]["extra"]["blocks"]
            assert len(blocks) == 4  # 2 groups x A B B A: two turns per group
            assert samples["shapes"]["s1"]["seconds"] > 0
            # written by the host from the turns it was told of, never by the worker
            kept = json.loads((host.tmp / RECORDS_DIR / f"{path.parent.name}.json").read_text())
            assert kept["folder"] == str(path.parent)
    assert rewritten(host.tmp) == []
    turns = [json.loads(line) for line in (host.tmp / "turns.jsonl").read_text().splitlines()]
    assert len(turns) == 2 * 2 * 4
    first = [t["worker"].split("-")[-1] for t in turns[:4]]
    assert first == ["incumbent", "candidate", "candidate", "incumbent"]
    for t in turns:  # the cgroup CPU guard's figure, or why the host could read none
        assert t["foreign_cpu_s"] is not None or t["cpu_guard_off"]
    assert {t["worker"] for t in turns[4:8]} == {"pass-03-incumbent", "pass-04-candidate"}
    for t in turns[:4]:  # one block, both roles on the same pool member per half
        assert t["pick"] == turns[0 if t in turns[:2] else 2]["pick"]
    spans = sorted((t["start"], t["end"]) for t in turns)
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start  # the token: never two workers measuring at once
    # the work beside: waited for and checked before each wave's first turn, in that
    # order, and quiet around every turn and every fresh step
    assert [name for name, _ in beside.calls] == ["wait", "check"]  # the CPU: one wave
    assert beside.calls[1][1] <= spans[0][0]
    assert all(beside.quiet_at(start) and beside.quiet_at(end) for start, end in spans)
    # the finish: each worker's fresh step timed alone, then all re-checks at once
    logs = [
        (host.tmp / path.parent.name / "worker.log").read_text()
        for paths in got.values()
        for path in paths
    ]
    fresh = sorted(
        (logged_at(x, "fresh step: timing"), logged_at(x, "fresh step: timed")) for x in logs
    )
    for (_, end), (start, _) in itertools.pairwise(fresh):
        assert end <= start
    assert all(beside.quiet_at(start) and beside.quiet_at(end) for start, end in fresh)
    assert min(logged_at(x, "finishing: the re-checks and files") for x in logs) >= fresh[-1][1]
    assert alive(host.tmp) == []


def test_wave_size_fits_the_device_memory() -> None:
    gib = 1 << 30
    # Reports without "held"/"prepare" count their peak for both (the figures of the
    # OOM seen on one H200: ten workers of about 13 GiB each on a 140 GiB device).
    first_pair = [
        {"reserved": 13 * gib, "free": 110 * gib},
        {"reserved": 12 * gib, "free": 97 * gib},
    ]
    # 0.9 * 97 - 1.25 * 13 = 71.05 GiB of room; a worker counts 13 + 1 GiB: 2 pairs more
    assert wave_size(first_pair, roles=2, pairs=5) == 1 + 2
    assert wave_size(first_pair, roles=4, pairs=5) == 1 + 1
    # The OOM seen when sharding: workers of 37 GiB after their turns, 66 GiB free
    assert wave_size([{"reserved": 37 * gib, "free": 66 * gib}] * 2, 2, 2) == 1
    assert wave_size([{"reserved": 13 * gib, "free": 5 * gib}] * 2, 2, 5) == 1  # alone
    assert wave_size([{}, {}], 2, 5) == 5  # the CPU: every pair at once


def test_wave_size_counts_a_turn_s_peak_once_and_what_workers_hold_for_each() -> None:
    """The H200 tournament (bc8d1bd, 2026-12-02): five workers a pair, each reserving
    15-18 GiB over its life.  Counted at its life's peak, a worker left room for one
    pair; most of that peak is a turn's graphs, handed back after the turn, and only
    one worker takes a turn at a time."""
    gib = 1 << 30
    worker = {"prepare": 6 * gib, "reserved": 16 * gib, "held": 5 * gib, "free": 105 * gib}
    # room 0.9 * 105 - 1.25 * 16 - 5 * (6 - 5) = 69.5 GiB; a pair 5 * (6 + 1) = 35 GiB
    assert wave_size([worker] * 5, roles=5, pairs=3) == 1 + 1
    assert wave_size([{**worker, "free": 125 * gib}] * 5, roles=5, pairs=3) == 1 + 2
    # the same worker counted at its life's peak (no "held", no "prepare"): one pair
    assert wave_size([{"reserved": 16 * gib, "free": 105 * gib}] * 5, roles=5, pairs=3) == 1
    # a worker whose preparation peaks above what its turns need counts that peak
    greedy = {**worker, "prepare": 20 * gib}
    assert wave_size([greedy] * 2, roles=2, pairs=9) < wave_size([worker] * 2, 2, 9)


def test_an_earlier_round_s_reports_on_this_machine_size_the_first_wave() -> None:
    """The H200 quick round with its capture fixed (a7b91ac, 2026-12-02): workers prepare
    at 7.2 GiB, hold 3.1 GiB between turns and peak at 11.1 GiB in a turn.  Sized by
    the first pair, the other two pairs started only after its turns; the baseline's
    reports let all three start together."""
    import socket
    from dataclasses import replace

    from runner.measure.waves import prior_wave

    gib = 1 << 30
    worker = WorkerMemory(
        prepare=int(7.2 * gib),
        reserved=int(11.1 * gib),
        held=int(3.1 * gib),
        free=125 * gib,
        total=140 * gib,
    )
    here = MemoryLog(socket.gethostname(), roles=1, workers={"pass-01-incumbent": worker})
    # empty device 125 + 4.1 = 129.1; room 0.9 * 129.1 - 1.25 * 11.1 = 102.3 GiB;
    # a pair of two roles 2 * (7.2 + 1) = 16.4 GiB: six pairs would fit, three asked for
    assert prior_wave(here, roles=2, pairs=3) == 3
    assert prior_wave(here, roles=5, pairs=3) == 2  # a tournament pair: 41 GiB
    assert prior_wave(here, roles=12, pairs=3) is None  # room for one: it measures alone
    assert prior_wave(replace(here, host="another-machine"), 2, 3) is None
    assert prior_wave(None, 2, 3) is None
    unusable = replace(here, workers={"w": WorkerMemory(reserved=1)})
    assert prior_wave(unusable, 2, 3) is None
    small = replace(here, workers={"w": replace(worker, total=40 * gib)})  # never above the total
    assert prior_wave(small, roles=2, pairs=3) is None


def test_a_quick_round_s_reports_do_not_size_a_session_of_larger_shapes() -> None:
    """An earlier session's reports size the next one's first wave only where its
    workers held as much: a full-level session after quick rounds (every target shape,
    and the held-out ones at acceptance) is planned from the op's figure instead."""
    from runner.core.op_info import shape_memory
    from runner.measure.waves import PRIOR_SLACK, prior_covers

    quick = [Shape("q1", 4096, 4096, 4096), Shape("q2", 4096, 12288, 4096)]
    full = [*quick, Shape("f3", 4096, 22016, 4096), Shape("f4", 16384, 12288, 4096)]
    probe = [*quick[:1], Shape("probe-r2-4144x12288x4096", 4144, 12288, 4096)]
    rows = {s.label: ShapeMemory(shape_memory("gemm_fp8", s).worker(2)) for s in quick}
    prior = MemoryLog("h", roles=2, pool=2, shapes=rows)
    assert prior_covers(prior, "gemm_fp8", quick, 2)
    assert prior_covers(prior, "gemm_fp8", probe, 2)  # a probe's M moved a little: within
    assert not prior_covers(prior, "gemm_fp8", full, 2)
    assert not prior_covers(prior, "gemm_fp8", quick, 4)  # more pool members each
    assert prior_covers(MemoryLog("h", roles=2), "gemm_fp8", full, 2)  # no figures kept
    assert prior_covers(None, "gemm_fp8", full, 2) and PRIOR_SLACK > 1


def test_the_memory_log_reads_back_as_written_and_a_malformed_one_assumes_nothing(
    tmp_path: Path,
) -> None:
    """``_keep_memory`` writes the log's keys as they always were, so a log of any
    version reads back to the same document.  A file that is missing, not JSON or not
    an object reads as None; a worker row of strings sizes no wave, and a shapes table
    without estimates keeps no per-shape figures (the log is taken as it is)."""
    import socket
    from types import SimpleNamespace

    from runner.measure.host import read_memory_log
    from runner.measure.paired import _keep_memory
    from runner.measure.waves import prior_covers, prior_wave

    gib = 1 << 30
    shapes = [Shape("q1", 4096, 4096, 4096), Shape("q2", 4096, 12288, 4096)]
    host = SimpleNamespace(tmp=tmp_path, template=SimpleNamespace(op="gemm_fp8"))
    first = {"held": 7 * gib, "free": 106 * gib, "total": 139 * gib, "prepare": 9 * gib}
    most = {
        "pass-01-baseline": {**first, "reserved": 25 * gib},
        "pass-02-final": {"held": 7 * gib, "free": 105 * gib, "reserved": 25 * gib},
    }
    session = SimpleNamespace(
        host=host,
        roles=["baseline", "final"],
        most=most,
        shapes=shapes,
        members=2,
        shape_peaks={"q1": 9 * gib},
        suffix="-r1",
    )
    _keep_memory(session)  # type: ignore[arg-type]
    path = tmp_path / "memory-r1.json"
    written = json.loads(path.read_text(encoding="utf-8"))
    assert set(written) == {"host", "roles", "workers", "pool", "shapes"}
    assert (written["host"], written["roles"], written["pool"]) == (socket.gethostname(), 2, 2)
    assert written["workers"] == most
    assert written["shapes"]["q1"]["measured"] == 9 * gib and set(written["shapes"]["q2"]) == {
        "estimate"
    }
    log = read_memory_log(path)
    assert log is not None and log.to_dict() == written
    assert MemoryLog.from_dict(log.to_dict()) == log
    assert log.workers["pass-02-final"] == WorkerMemory(
        reserved=25 * gib, held=7 * gib, free=105 * gib
    )
    assert log.shapes["q2"].measured is None
    assert not prior_covers(log, "gemm_fp8", shapes, 4)
    row = {"held": 1, "free": 2, "total": 3, "reserved": 5}
    older = {
        "host": "h200-a",
        "roles": 2,
        "pool": 2,
        "shapes": {"q1": {"estimate": 6}},
        "workers": {"pass-01-baseline": row},
    }
    back = MemoryLog.from_dict(json.loads(json.dumps(older)))
    assert back is not None and back.to_dict() == older

    for text in ("not json", "[1, 2]", '"host"'):
        path.write_text(text, encoding="utf-8")
        assert read_memory_log(path) is None
    assert read_memory_log(tmp_path / "missing.json") is None
    strings = {"free": "1", "reserved": "1", "held": "1"}
    odd = {
        **written,
        "roles": "two",
        "workers": {"w": strings, "x": [1]},
        "shapes": {"q1": {"measured": 1}, "q2": {"estimate": 5}},
    }
    path.write_text(json.dumps(odd), encoding="utf-8")
    log = read_memory_log(path)
    assert log is not None and log.workers == {"w": WorkerMemory(), "x": WorkerMemory()}
    assert log.roles == 0 and log.shapes == {}
    assert prior_wave(log, 2, 3) is None  # no usable worker row
    assert prior_covers(log, "gemm_fp8", shapes, 4)  # no per-shape figures kept


def test_a_wave_finishes_side_by_side_only_where_its_memory_allows() -> None:
    """The H200 quick rounds whose finishes ran side by side ran out of memory (six
    workers keeping 13-17 GiB each, no check of the room).  Side by side only when one
    fresh step and every re-check's growth fit in the free memory; the CPU (no
    reports) always."""
    from runner.measure.waves import finish_side_by_side

    gib = 1 << 30
    lean = {"prepare": 6 * gib, "reserved": 9 * gib, "held": 4 * gib, "free": 80 * gib}
    assert finish_side_by_side([lean] * 15)  # 1.25 * 9 and 15 * 2 within 72 GiB
    assert not finish_side_by_side([{**lean, "free": 20 * gib}] * 15)  # 30 GiB of growth
    assert not finish_side_by_side([{**lean, "reserved": 70 * gib}] * 2)  # one fresh step
    assert not finish_side_by_side([lean, {}])  # a GPU worker without a report
    assert finish_side_by_side([{}, {}])  # the CPU


@pytest.mark.integration
def test_pairs_run_in_waves(tmp_path: Path) -> None:
    host, tree = example_host(tmp_path, wave_pairs=1)
    trees = {"incumbent": tree, "candidate": tree}
    got = measure_paired(
        host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=2
    )
    assert [p.parent.name for p in got["candidate"]] == ["pass-02-candidate", "pass-04-candidate"]
    turns = [json.loads(line) for line in (host.tmp / "turns.jsonl").read_text().splitlines()]
    assert [t["pair"] for t in turns] == [0, 0, 0, 0, 1, 1, 1, 1]
    # the second wave started after the first finished: its workers' logs begin later
    first_done = (tmp_path / "round" / "pass-01-incumbent" / "benchmark.csv").stat().st_mtime
    second_log = (tmp_path / "round" / "pass-03-incumbent" / "worker.log").read_text()
    assert second_log and turns[4]["start"] > first_done
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_on_a_gpu_target_the_first_pair_measures_alone(tmp_path: Path) -> None:
    """A GPU target (device "auto": the CPU here, so no memory report): the first pair
    starts and takes its turns alone; the rest start after it (here all of them)."""
    from dataclasses import replace

    host, tree = example_host(tmp_path)
    host.template = replace(host.template, device="auto")
    assert host.gpu_target
    trees = {"incumbent": tree, "candidate": tree}
    measure_paired(
        host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=3, groups=2
    )
    turns = [json.loads(line) for line in (host.tmp / "turns.jsonl").read_text().splitlines()]
    assert [t["pair"] for t in turns[:8]] == [0] * 8  # both groups of pair 0 first
    assert [t["pair"] for t in turns[8:12]] == [1, 1, 1, 1]  # then group 0 of pairs 1, 2
    assert [t["pair"] for t in turns[12:16]] == [2, 2, 2, 2]
    assert [t["group"] for t in turns[16:]] == [1] * 8
    # a GPU's finish as the CPU's: each fresh step timed alone, then the re-checks at
    # once (each worker has handed its pool back; the wave was sized for it)
    logs = [
        (host.tmp / f"pass-0{k}-{r}" / "worker.log").read_text()
        for k, r in enumerate(["incumbent", "candidate"] * 3, start=1)
    ]
    fresh = sorted(
        (logged_at(x, "fresh step: timing"), logged_at(x, "fresh step: timed")) for x in logs
    )
    for (_, end), (start, _) in itertools.pairwise(fresh):
        assert end <= start
    assert min(logged_at(x, "finishing: the re-checks and files") for x in logs) >= fresh[-1][1]
    assert alive(host.tmp) == []


def logged_at(log: str, message: str) -> float:
    """The time (epoch seconds) of the worker log line ending in ``message``."""
    from datetime import datetime

    line = next(line for line in log.splitlines() if line.endswith(message))
    stamp = datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp()


@pytest.mark.integration
def test_out_of_device_memory_fails_the_worker_not_the_code(tmp_path: Path) -> None:
    """A worker whose device runs out of memory stops and says so (the round FAILs as an
    infrastructure failure), instead of writing FAIL rows that read as a wrong result."""
    host, tree = example_host(tmp_path)
    starved = tmp_path / "starved"
    shutil.copytree(tree, starved)
    kernel = starved / "turbo_kernels" / "cpu" / "gemm.py"
    text = kernel.read_text(encoding="utf-8")
    head = "-> torch.Tensor:\n"  # the end of gemm_torch's signature, its only function
    assert head in text
    oom = '    raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")\n'
    kernel.write_text(text.replace(head, head + oom), encoding="utf-8")
    trees = {"incumbent": tree, "candidate": starved}
    with pytest.raises(DeviceOutOfMemory) as info:
        measure_paired(host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=1)
    assert info.value.return_code == 6  # infrastructure, not a verdict
    assert "worker pass-02-candidate ran out of device memory on shape s1" in info.value.message
    assert "asked for 2.00 GiB" in info.value.message
    assert not (host.tmp / "pass-02-candidate" / "benchmark.csv").exists()
    assert alive(host.tmp) == []


def plant_oom(tree: Path, dest: Path, message: str) -> Path:
    """A copy of the example ``tree`` whose torch GEMM raises torch.OutOfMemoryError
    with ``message`` (what the CUDA allocator says) on every call."""
    shutil.copytree(tree, dest)
    kernel = dest / "turbo_kernels" / "cpu" / "gemm.py"
    text = kernel.read_text(encoding="utf-8")
    head = "-> torch.Tensor:\n"  # the end of gemm_torch's signature, its only function
    assert head in text
    oom = f"    raise torch.OutOfMemoryError({message!r})\n"
    kernel.write_text(text.replace(head, head + oom), encoding="utf-8")
    return dest


@pytest.mark.integration
def test_a_pass_out_of_device_memory_writes_no_fail_row_and_names_the_figure(
    tmp_path: Path,
) -> None:
    """A fresh-process pass (the full benchmark's, a container's or a Slurm job's) whose
    device runs out of memory stops there: no benchmark.csv with a FAIL row, and the
    host's error (exit 6) names the shape, the bytes asked and the device's total."""
    host, tree = example_host(tmp_path)
    said = (
        "CUDA out of memory. Tried to allocate 14.00 GiB. GPU 0 has a total capacity "
        "of 139.81 GiB of which 2.00 GiB is free."
    )
    starved = plant_oom(tree, tmp_path / "starved", said)
    shapes = [Shape("big", 32, 64, 64), Shape("s1", 16, 64, 64)]
    outcome = run_job(host, "pass-01-final", host.template.for_pass("final", 1, shapes), starved)
    assert not outcome.ok and outcome.returncode == 6
    assert not (outcome.out_dir / "benchmark.csv").exists()
    error = failed_worker("pass-01-final", outcome)
    assert isinstance(error, DeviceOutOfMemory) and error.return_code == 6
    assert error.record["shape"] == "big"
    assert "on shape big: it asked for 14.00 GiB on a device of 139.81 GiB" in error.message
    # final acceptance's full benchmark (the example's: one worker at level full)
    from runner.flow.accept import _example_full_benchmark

    dest = tmp_path / "full_benchmark.csv"
    with pytest.raises(DeviceOutOfMemory) as info:
        _example_full_benchmark(host, starved, shapes, dest)  # type: ignore[arg-type]
    assert "worker full-benchmark ran out of device memory on shape big" in info.value.message
    assert not dest.exists()  # no FAIL row to read as a wrong result


@pytest.mark.integration
def test_a_failing_worker_stops_the_others_and_says_why(tmp_path: Path) -> None:
    host, tree = example_host(tmp_path)
    broken = tmp_path / "broken"
    broken.mkdir()  # no turbo_kernels here: the candidate cannot import its target
    trees = {"incumbent": tree, "candidate": broken}
    with pytest.raises(MeasurementFailed) as info:
        measure_paired(host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=2)
    assert "pass-02-candidate failed (exit 1)" in info.value.message
    assert info.value.log_path and "turbo_kernels" in info.value.log_path.read_text()
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_a_worker_that_never_gets_ready_fails_within_the_ready_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TURBO_CAMPAIGN_READY_TIMEOUT_S lowers the limit a serving worker has to say it is
    ready (1800 s by default): a tree that hangs at import fails the measurement with
    that limit named (the first worker the host waits for), and no worker is left
    alive."""
    host, tree = example_host(tmp_path)
    init = tree / "turbo_kernels" / "__init__.py"
    init.write_text("import time\ntime.sleep(600)\n" + init.read_text(encoding="utf-8"))
    monkeypatch.setenv(READY_TIMEOUT_ENV, "3")
    trees = {"incumbent": tree, "candidate": tree}
    with pytest.raises(MeasurementFailed) as info:
        measure_paired(host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=1)
    assert "worker pass-01-incumbent failed" in info.value.message
    assert "gave no answer within 3 s" in info.value.message
    assert alive(host.tmp) == []


@pytest.mark.parametrize("value", ["soon", "0", "-3", "nan"])
def test_a_bad_worker_limit_is_refused_before_any_worker_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    host, tree = example_host(tmp_path)
    monkeypatch.setenv(TURN_TIMEOUT_ENV, value)
    with pytest.raises(ConfigError, match=f"{TURN_TIMEOUT_ENV}=.*unset it or fix it"):
        measure_paired(
            host,
            {"incumbent": tree, "candidate": tree},
            [Shape("s1", 16, 64, 64)],
            ["incumbent", "candidate"],
            pairs=1,
        )
    assert not list(host.tmp.glob("pass-*"))


@pytest.mark.integration
def test_eight_simulated_devices_split_by_seconds_and_merge(tmp_path: Path) -> None:
    host, tree = example_host(tmp_path)
    shapes = [Shape(f"s{i}", 16 * (1 + i % 3), 64, 64) for i in range(10)]
    seconds = {s.label: 1.0 for s in shapes} | {"s0": 3.0, "s9": 2.5}
    rnd = PlainHost(
        host.tmp,
        host.executor,
        host.template,
        host.job_env,
        gpus=tuple(range(8)),
        manifest=PlainManifest(shape_seconds=seconds),
    )
    assert supports_paired(rnd.executor)
    got = measure_roles(rnd, {"baseline": tree}, shapes, 1)
    (merged,) = got["baseline"]
    assert merged == rnd.tmp / "pass-01-baseline" / "benchmark.csv"
    csv = read_csv(merged)
    assert csv.labels() == [s.label for s in shapes] and all(r.passed for r in csv.rows)
    shard_dirs = sorted(p.name for p in rnd.tmp.glob("pass-01-baseline-gpu*"))
    assert shard_dirs == [f"pass-01-baseline-gpu{g}" for g in range(8)]
    labels = {d: read_csv(rnd.tmp / d / "benchmark.csv").labels() for d in shard_dirs}
    assert labels["pass-01-baseline-gpu0"] == ["s0"]  # the costliest shape alone
    assert labels["pass-01-baseline-gpu1"] == ["s9"]
    assert sorted(lb for ls in labels.values() for lb in ls) == sorted(s.label for s in shapes)
    for g in range(8):  # each worker was shown only its own device
        meta = json.loads((rnd.tmp / f"pass-01-baseline-gpu{g}" / "meta.json").read_text())
        assert meta["visible_devices"]["CUDA_VISIBLE_DEVICES"] == str(g)
    assert any("8 shard(s) on GPUs [0, 1, 2, 3, 4, 5, 6, 7]" in m for m in rnd.said)


def test_fresh_pass_blocks_are_palindromes_with_the_candidates_rotated() -> None:
    """B C C B (C B for an odd sample) for two roles, as always; a tournament's three
    roles: B C D D C B, then B D C C D B, so no candidate keeps a position."""
    from runner.compare.loop import pass_patterns

    assert pass_patterns(["b", "c"], 3) == [("b", "c", "c", "b"), ("c", "b")]
    assert pass_patterns(["b", "c", "d"], 4) == [
        ("b", "c", "d", "d", "c", "b"),
        ("b", "d", "c", "c", "d", "b"),
    ]
    assert pass_patterns(["b"], 2) == [("b",), ("b",)]


# ---- the multi-GPU path as users drive it ----------------------------------------------
@pytest.mark.integration
def test_cli_validate_gpus_leases_and_shards(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    """`campaign validate --gpus 0,1` on simulated devices (CPU): both GPUs leased for
    the round, every worker shown only its GPU, the shards merged into the round."""
    import os
    import sys

    from runner.flow.new_campaign import EXAMPLES_DIR
    from runner.store.campaign import Campaign

    root = copy_campaign(slow_tiny, tmp_path / "c", "t")
    campaign = Campaign.load(root)
    assert set(campaign.manifest.shape_seconds) == {
        s.label for s in campaign.load_result(1).score.shapes
    }
    leases = tmp_path / "leases"
    patch = EXAMPLES_DIR / "demo_patches" / "speedup_reuse_fp8_weight.patch"
    cmd = [
        sys.executable,
        "-m",
        "runner",
        "--campaigns-root",
        str(root.parent),
        "validate",
        "--round",
        "2",
        "--hypothesis",
        "reuse the fp8 weight",
        "--bucket",
        "K4",
        "--patch",
        str(patch),
        "--gpus",
        "0,1",
    ]
    # the verdict is not asserted (0 or 3): the first pairs are final, not pairs of the
    # demo's small speed-up measured up to the suite's cap
    env = {**os.environ, "CAMPAIGN_LEASE_DIR": str(leases), "TURBO_CAMPAIGN_ROUND_CAP_S": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode in (0, 3), proc.stdout + proc.stderr
    assert "shard(s) on GPUs [0, 1]" in proc.stderr  # progress goes to stderr
    # the GPU leases, and beside them one preparation lock per device (a worker takes it
    # only on a GPU: runner.core.prepare_lock)
    assert sorted(p.name for p in leases.iterdir()) == ["gpu-0.lock", "gpu-1.lock", "prepare"]
    assert sorted(p.name for p in (leases / "prepare").iterdir()) == ["gpu-0.lock", "gpu-1.lock"]
    assert all(p.read_text() == "" for p in leases.glob("gpu-*.lock"))  # released after it
    art = Campaign.load(root).artifacts_dir(2)
    shard_dirs = sorted(p.name for p in (art / "passes").glob("pass-*-gpu*"))
    assert "pass-01-incumbent-gpu0" in shard_dirs and "pass-02-candidate-gpu1" in shard_dirs
    for d in shard_dirs:
        meta = json.loads((art / "passes" / d / "meta.json").read_text())
        assert meta["visible_devices"]["CUDA_VISIBLE_DEVICES"] == d[-1]
    merged = read_csv(art / "passes" / "pass-01-incumbent" / "benchmark.csv")
    # the quick level's shapes (the representative ones): every shard's rows merged
    quick = [s.label for s in level_shapes(Campaign.load(root).manifest, "quick")]
    listed = [label for label in merged.labels() if not is_probe(label)]  # the probe
    assert len(quick) >= 2 and sorted(listed) == sorted(quick)
    samples = json.loads((art / "passes" / "pass-01-incumbent" / "samples.json").read_text())
    assert sorted(samples["shapes"]) == sorted(merged.labels())  # every shard's records
    assert (art / "turns-gpu0.jsonl").is_file() and (art / "turns-gpu1.jsonl").is_file()


@pytest.mark.slurm
def test_slurm_round_shards_as_one_job_array(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A VALIDATE round through the Slurm executor with --gpus 0,1 on the real one-node
    cluster: the shards go as one job array, one task per shard, then merge."""
    from runner.executors.slurm import SlurmExecutor
    from runner.flow.new_campaign import EXAMPLES_DIR
    from runner.flow.validate import Request, validate_round
    from runner.store.campaign import Campaign

    out = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, check=False)
    if out.returncode != 0 or not out.stdout.strip():
        pytest.skip("no Slurm cluster (sinfo failing); run scripts/slurm-setup.sh")
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    patch = (EXAMPLES_DIR / "demo_patches" / "speedup_reuse_fp8_weight.patch").read_text()
    request = Request(2, "reuse the fp8 weight", patch, bucket="K4", gpus=(0, 1))
    # any verdict (below): the first job array is final, no more arrays up to the cap
    monkeypatch.setenv("TURBO_CAMPAIGN_ROUND_CAP_S", "1")
    said: list[str] = []
    result = validate_round(campaign, SlurmExecutor(), request, progress=said.append)
    assert result.gate is not None, result.reasons
    assert any("as one Slurm job array" in m for m in said), result.reasons
    passes = campaign.artifacts_dir(2) / "passes"
    tasks = set()
    for d in sorted(passes.glob("pass-*-shard*")):
        record = json.loads((d / "slurm.json").read_text())
        tasks.add((record["array_job_id"], record["array_task_id"]))
    assert {t for _, t in tasks} == {"0", "1"} and len({j for j, _ in tasks}) >= 1
    assert read_csv(passes / "pass-01-incumbent" / "benchmark.csv").labels()


def test_a_worker_holds_only_the_pool_members_its_turns_use() -> None:
    assert pool_members(None, gpu_target=True, turns=2) == 2  # A B B A: two turns, not four
    assert pool_members(None, gpu_target=True, turns=8) == 4
    assert pool_members(6, gpu_target=True, turns=8) == 6
    assert pool_members(1, gpu_target=True, turns=2) == 1
    assert pool_members(None, gpu_target=False, turns=2) == 2
    assert pool_members(None, gpu_target=False, turns=1) == 1  # one role: one turn each


@pytest.fixture
def tiny_copy(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> Path:
    """A private copy of the session's ``slow_tiny`` campaign (conftest)."""
    return copy_campaign(slow_tiny, tmp_path / "c", "t")


def gpu_round(campaign_dir: Path, tmp: Path) -> tuple[RoundPlan, list[Shape]]:
    """A quick round of a copy of ``slow_tiny`` as if it measured a GPU (its manifest
    says sm90 in memory only), and its shapes; on this CPU host the workers' device
    "auto" is the CPU."""
    campaign = Campaign.load(campaign_dir)
    campaign.manifest = campaign.manifest.model_copy(update={"target_gpu": "sm90"})
    tmp.mkdir()
    rnd = RoundPlan(campaign, LocalExecutor(), lambda message: None, tmp, 99, "quick")
    assert rnd.gpu_target and rnd.quick_gpu
    return rnd, level_shapes(campaign.manifest, "quick")


def test_work_beside_the_start_up_keeps_workers_from_autotuning(
    tiny_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Work run beside the workers' start-up on a GPU target (a focused test) runs
    kernels on their device: while it runs, the host holds the device's preparation lock
    shared, so a worker's exclusive hold (its autotune) cannot be taken."""
    monkeypatch.setenv("CAMPAIGN_LEASE_DIR", str(tmp_path / "leases"))
    rnd, _shapes = gpu_round(tiny_copy, tmp_path / "round")
    rnd = replace(rnd, gpus=(3,))
    path = lock_path(tmp_path / "leases", "3")
    seen: list[str] = []

    def work() -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            with pytest.raises(BlockingIOError):
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # another preparing worker
            seen.append("shared")
        finally:
            os.close(fd)

    with BesideStartUp(rnd, "focused-test-candidate", work) as beside:
        assert beside.beside and beside.wait()
    assert seen == ["shared"]
    with DeviceLock(path) as lock, lock.exclusive() as waited:  # free again after it
        assert waited < 5.0


def test_the_full_suite_beside_the_start_up_holds_no_device_lock(
    tiny_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Acceptance's full suite runs for minutes beside the start-up: it holds no lock, so
    a worker's autotune never waits for the whole suite."""
    monkeypatch.setenv("CAMPAIGN_LEASE_DIR", str(tmp_path / "leases"))
    rnd, _shapes = gpu_round(tiny_copy, tmp_path / "round")
    rnd = replace(rnd, gpus=(3,))
    path = lock_path(tmp_path / "leases", "3")
    taken: list[str] = []

    def work(_env: dict[str, str]) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises while anyone holds it
            taken.append("alone")
        finally:
            os.close(fd)

    suite = SuiteBeside(rnd, "python -m pytest tests", tmp_path / "yield", work)
    with suite:
        assert suite.beside and suite.wait()
    assert taken == ["alone"]


@pytest.mark.integration
def test_a_focused_test_failing_beside_the_workers_stops_them_before_any_turn(
    tiny_copy: Path, tmp_path: Path
) -> None:
    rnd, shapes = gpu_round(tiny_copy, tmp_path / "round")
    kernel = "turbo_kernels/pytorch/ops/gemm_fp8.py"
    with rnd.lineage.worktree(rnd.lineage.head()) as tree:
        text = (tree / kernel).read_text(encoding="utf-8")
        old = "return gemm_fp8_impl("
        assert old in text
        broken = text.replace(old, "return 2 * gemm_fp8_impl(")  # wrong by a factor 2
        with rnd.lineage.worktree(rnd.lineage.head()) as bad:
            (bad / kernel).write_text(broken, encoding="utf-8")
            with FocusedTest(rnd, "candidate", bad) as test:
                trees = {"incumbent": tree, "candidate": bad}
                with pytest.raises(FocusedTestFailed) as info:
                    measure_roles(rnd, trees, shapes, 1, beside=test.beside_work)
    assert not test.ok and "failed" in info.value.tail
    assert not (rnd.tmp / "turns.jsonl").exists() or not (rnd.tmp / "turns.jsonl").read_text()
    assert (rnd.tmp / "specs" / "pass-02-candidate.json").exists()  # they had started
    assert alive(rnd.tmp) == []


@pytest.mark.integration
def test_a_tournament_s_focused_tests_run_beside_worker_start_up(
    tiny_copy: Path, tmp_path: Path
) -> None:
    """On a GPU target a tournament's focused tests (``EntryTests``) run beside the
    first measurement's worker start-up; one that fails vetoes its entry alone and stops
    the workers before any turn (``measure_entries`` then measures without it)."""
    rnd, shapes = gpu_round(tiny_copy, tmp_path / "round")
    kernel = "turbo_kernels/pytorch/ops/gemm_fp8.py"
    head = rnd.lineage.head()
    with rnd.lineage.worktree(head) as tree, rnd.lineage.worktree(head) as bad:
        text = (bad / kernel).read_text(encoding="utf-8")
        broken = text.replace("return gemm_fp8_impl(", "return 2 * gemm_fp8_impl(")
        (bad / kernel).write_text(broken, encoding="utf-8")
        good = Entry(Request(99, "the same code", None), 1, tree=tree)
        wrong = Entry(Request(100, "wrong by a factor 2", None), 2, tree=bad)
        tests = EntryTests(rnd, [good, wrong])
        assert tests.beside and tests.beside_work.waits == (tests.require,)
        trees = {"incumbent": tree, good.role: tree, wrong.role: bad}
        with pytest.raises(FocusedTestFailed, match="round-100"):
            measure_roles(rnd, trees, shapes, 1, beside=tests.beside_work)
        tests.close()
    assert wrong.vetoes and "focused test failed" in wrong.vetoes[0] and not good.vetoes
    tests.require()  # the measurement again without the entry is not held a second time
    tested = max((rnd.tmp / f"test-{e.role}" / "test.log").stat().st_mtime for e in (good, wrong))
    for e in (good, wrong):  # side by side, each test's math libraries got half the cores
        ran = json.loads((rnd.tmp / f"test-{e.role}" / "test.json").read_text(encoding="utf-8"))
        assert ran["threads"] == str(max(1, (os.cpu_count() or 1) // 2)), ran
    assert not (Path.cwd() / "test-candidate").exists()  # entries without records: none copied
    spawned = (rnd.tmp / "specs" / "pass-01-incumbent.json").stat().st_mtime
    assert spawned < tested  # the workers started while the tests ran
    turns = rnd.tmp / "turns.jsonl"
    assert not turns.exists() or not turns.read_text()  # and nothing was timed
    assert alive(rnd.tmp) == []


def test_sequential_batches_fit_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    from runner.compare.loop import MAX_PAIRS, Cap, measurement_cap, next_pairs
    from runner.judge.measuring_caps import CAP_PAIRS, PROMISING_PAIRS

    # 3 pairs took 60 s (20 s a pair, start-up included): 4 more fit in 150 s, not 6
    assert next_pairs(6, 3, 60.0, Cap(150.0)) == 4
    assert next_pairs(2, 3, 60.0, Cap(150.0)) == 2
    assert next_pairs(6, 3, 140.0, Cap(150.0)) == 0  # the judgement is then final
    assert next_pairs(50, MAX_PAIRS - 2, 1.0, Cap(1e9)) == 2
    # the pair floor: 6 pairs at 25 s filled 150 s, yet 6 more may come (12 in all)
    assert next_pairs(6, 6, 150.0, Cap(150.0, 12)) == 6
    assert next_pairs(9, 6, 150.0, Cap(150.0, 12)) == 6
    assert next_pairs(4, 12, 300.0, Cap(150.0, 12)) == 0  # past both: final
    # a gain whose interval lies above 1% may go on to the promising floor, no further
    assert next_pairs(12, 12, 300.0, Cap(150.0, 12, 24), promising=True) == 12
    assert next_pairs(12, 12, 300.0, Cap(150.0, 12, 24), promising=False) == 0
    assert next_pairs(12, 24, 600.0, Cap(150.0, 12, 24), promising=True) == 0
    monkeypatch.delenv("TURBO_CAMPAIGN_ROUND_CAP_S", raising=False)
    assert measurement_cap("quick") == Cap(150.0, CAP_PAIRS, PROMISING_PAIRS)
    assert measurement_cap("full") == Cap(600.0, CAP_PAIRS, PROMISING_PAIRS)
    monkeypatch.setenv("TURBO_CAMPAIGN_ROUND_CAP_S", "30")  # exactly that: no floor
    assert measurement_cap("quick") == Cap(30.0, 0, 0)
    monkeypatch.setenv("TURBO_CAMPAIGN_ROUND_CAP_S", "soon")
    with pytest.raises(ConfigError, match="TURBO_CAMPAIGN_ROUND_CAP_S"):
        measurement_cap("quick")


def test_a_round_s_memory_prior_is_the_latest_earlier_round_s_reports(
    tiny_copy: Path, tmp_path: Path
) -> None:
    """``RoundPlan.memory_prior``: this round's own last session's reports, else the newest
    ``artifacts/memory.json`` of a round before this one (a later round's, or an
    unreadable one, is not used)."""
    rnd, _ = gpu_round(tiny_copy, tmp_path / "round")
    campaign = rnd.campaign
    for n, text in (
        (1, '{"host": "a"}'),
        (3, '{"host": "b"}'),
        (4, "not json"),
        (120, '{"host": "later"}'),
    ):
        campaign.artifacts_dir(n).mkdir(parents=True, exist_ok=True)
        (campaign.artifacts_dir(n) / "memory.json").write_text(text)
    assert rnd.memory_prior == MemoryLog("b", roles=0)
    (campaign.artifacts_dir(3) / "memory.json").unlink()
    assert rnd.memory_prior == MemoryLog("a", roles=0)
    (rnd.tmp / "memory.json").write_text('{"host": "this round"}')  # a re-measurement's
    assert rnd.memory_prior == MemoryLog("this round", roles=0)


@pytest.mark.integration
def test_on_a_gpu_target_accept_takes_short_turns_with_its_suite_yielding_beside_them(
    tiny_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """docs/protocol.md §1.4: on a GPU target ``campaign accept``'s full validation takes a
    quick round's short turns (its final role's merged samples are the full benchmark,
    recorded with that timing), and the full test suite (one pytest run) runs beside
    full validation, giving the device up whenever work is timed: it started before the
    first turn and ran on after it, and none of its tests ran during a turn."""
    from runner.flow.accept import run_acceptance

    # 40 s of tests, longer than the workers' start-up (12 s were not on the 2-core CI at
    # e1a1ff7: the suite ended before the first turn, so it never gave the device up)
    slow = slow_suite(tmp_path, 200, 0.2)
    suite = f"python -m pytest {slow} -q -p no:cacheprovider"
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    campaign = Campaign.load(tiny_copy)
    # the campaign's own suite (`init --suite-command`) in place of the target's
    update = {"target_gpu": "sm90", "suite_command": suite}
    campaign.manifest = campaign.manifest.model_copy(update=update)
    result = run_acceptance(campaign, LocalExecutor(), passes=1, progress=lambda m: None)
    art = tiny_copy / "acceptance" / "artifacts"
    suite_record = result.full_suite
    assert suite_record["returncode"] == 0, suite_record["tail"]
    assert suite_record["command"] == suite
    assert "gave the device up" in suite_record["ran"]
    page = (tiny_copy / "acceptance" / "acceptance.md").read_text()
    assert "- Ran: beside full validation (" in page
    assert suite_record["tests_logged"] == 200 and suite_record["during_timed_work"] == []
    assert suite_record["yielded"]["pauses"] >= 1
    turns = [json.loads(line) for line in (art / "turns.jsonl").read_text().splitlines()]
    spans = [
        json.loads(line)
        for p in (art / "passes" / "full-suite" / "yield").glob("tests-*")
        for line in p.read_text().splitlines()
    ]
    first_turn = min(t["start"] for t in turns)
    assert min(s["start"] for s in spans) < first_turn < max(s["end"] for s in spans)
    spec = json.loads((art / "passes" / "specs" / "pass-02-final.json").read_text())
    assert spec["timing"]["budget_s"] <= QUICK_TURN["budget_s"]
    assert spec["timing"]["batch_s"] <= QUICK_TURN["batch_s"]
    assert result.full_benchmark["timing"] == spec["timing"]
    samples = json.loads((art / "passes" / "pass-02-final" / "samples.json").read_text())
    assert samples["pool"] == 2  # two turns each: two members, not the default four


# The example's GEMM made to die by SIGSEGV once: in the worker process that is the
# ``nth`` to call it (in any role), as a graph replay kills its process on MI350 under
# ROCm 7.1-7.2.  Each process takes the next number at its first call.
CRASH_ONCE = """
import os as _os, signal as _signal

_TAKEN = []

def _crash_once():
    if _TAKEN:
        return
    k = 1
    while True:
        try:
            _os.close(_os.open(f"{folder}/call-{{k}}", _os.O_CREAT | _os.O_EXCL | _os.O_WRONLY))
            break
        except FileExistsError:
            k += 1
    _TAKEN.append(k)
    if k == {nth}:
        _os.kill(_os.getpid(), _signal.SIGSEGV)
"""


def crashing_host(
    tmp_path: Path, device: str, nth: int = 1, wave_pairs: int | None = None
) -> tuple[PlainHost, Path]:
    """``example_host`` on ``device`` whose GEMM crashes the ``nth`` process to call it."""
    from dataclasses import replace

    host, tree = example_host(tmp_path, wave_pairs=wave_pairs)
    host.template = replace(host.template, device=device)
    op = tree / "turbo_kernels" / "pytorch" / "ops" / "gemm.py"
    text = op.read_text(encoding="utf-8")
    call = "    return GemmFunction.apply(a, b, trans_a, trans_b, out_dtype or a.dtype)\n"
    assert text.count(call) == 1, "the example's gemm() changed: plant the crash anew"
    text = text.replace(call, "    _crash_once()\n" + call)
    (tmp_path / "calls").mkdir()
    plant = CRASH_ONCE.format(folder=str(tmp_path / "calls"), nth=nth)
    op.write_text(text + plant, encoding="utf-8")
    return host, tree


def test_crash_signal_reads_popen_and_shell_exit_codes() -> None:
    assert [crash_signal(c) for c in (-11, 139, -6, 134, -7, 135)] == [11, 11, 6, 6, 7, 7]
    # stopped from outside, or an error the worker's own code raised: no crash
    assert [crash_signal(c) for c in (-9, 137, -15, 143, 1, 2, 0, None)] == [None] * 8


@pytest.mark.integration
def test_a_worker_crash_on_a_gpu_target_measures_again_with_plain_launches(
    tmp_path: Path,
) -> None:
    """A GPU target (device "auto": the CPU here) whose worker dies by SIGSEGV: the
    session's folders go aside, the pairs are measured again by workers whose timing
    has graphs off, and the fallback is noted for the round's record."""
    host, tree = crashing_host(tmp_path, "auto")
    trees = {"incumbent": tree, "candidate": tree}
    got = measure_paired(
        host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=1
    )
    assert [p.parent.name for p in got["incumbent"]] == ["pass-03-incumbent"]
    assert [p.parent.name for p in got["candidate"]] == ["pass-04-candidate"]
    assert all(p.is_file() for paths in got.values() for p in paths)
    aside = sorted(p.name for p in (host.tmp / "graph-crash").iterdir())
    assert aside == ["pass-01-incumbent", "pass-02-candidate"]
    graphs = {p.stem: load_spec(p).timing.graphs for p in (host.tmp / "specs").glob("*.json")}
    assert graphs == {
        "pass-01-incumbent": True,
        "pass-02-candidate": True,
        "pass-03-incumbent": False,
        "pass-04-candidate": False,
    }
    (note,) = launch_notes(host.tmp)
    assert "graph replay off: worker pass-0" in note and "(exit -11)" in note
    assert "SIGSEGV" in note and "plain launches" in note
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_after_a_replay_crash_the_round_s_later_pairs_start_with_plain_launches(
    tmp_path: Path,
) -> None:
    """More pairs asked for after a worker crashed under graph replay start with
    replay off: on an H100 (benchmarks/graph_crash_gpu.py, 2026-12-06) the round's second
    batch of pairs replayed again, crashed again and cost another worker start-up."""
    host, tree = crashing_host(tmp_path, "auto")
    trees = {"incumbent": tree, "candidate": tree}
    shapes, roles = [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"]
    measure_paired(host, trees, shapes, roles, pairs=1)
    got = measure_paired(host, trees, shapes, roles, pairs=1, start_index=4)
    assert [p.parent.name for p in got["candidate"]] == ["pass-06-candidate"]
    graphs = {p.stem: load_spec(p).timing.graphs for p in (host.tmp / "specs").glob("*.json")}
    assert graphs["pass-05-incumbent"] is False and graphs["pass-06-candidate"] is False
    assert len(launch_notes(host.tmp)) == 1
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_a_crash_in_a_later_wave_sets_the_earlier_wave_s_records_aside_too(
    tmp_path: Path,
) -> None:
    """One pair per wave; the third process to call the GEMM (of the second wave) crashes: the first
    wave's folders and the host's records of them go aside together, so the records
    check finds nothing changed, and both pairs are measured again."""
    host, tree = crashing_host(tmp_path, "auto", nth=3, wave_pairs=1)
    trees = {"incumbent": tree, "candidate": tree}
    got = measure_paired(
        host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=2
    )
    assert [p.parent.name for p in got["candidate"]] == ["pass-06-candidate", "pass-08-candidate"]
    aside = host.tmp / "graph-crash"
    assert sorted(p.name for p in (aside / RECORDS_DIR).iterdir()) == [
        "pass-01-incumbent.json",
        "pass-02-candidate.json",
    ]
    assert rewritten(host.tmp) == []
    (note,) = launch_notes(host.tmp)
    assert re.search(r"worker pass-0[34]-\w+ failed", note) and "SIGSEGV" in note
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_a_worker_crash_on_the_cpu_fails_the_measurement(tmp_path: Path) -> None:
    """No graph is replayed on a CPU target: the crash fails the measurement as it is."""
    host, tree = crashing_host(tmp_path, "cpu")
    trees = {"incumbent": tree, "candidate": tree}
    with pytest.raises(WorkerCrashed, match="exited before answering") as info:
        measure_paired(host, trees, [Shape("s1", 16, 64, 64)], ["incumbent", "candidate"], pairs=1)
    assert info.value.signal == 11
    assert not (host.tmp / "graph-crash").exists() and launch_notes(host.tmp) == []
    assert alive(host.tmp) == []


@pytest.mark.integration
def test_the_baseline_s_empirical_peak_on_a_card_torch_cannot_see_is_not_measured_and_says_so(
    tiny_copy: Path, tmp_path: Path
) -> None:
    """The reference GEMM runs as a job on the round's card; here (a GPU target on this
    CPU host) it fails, so nothing is written and the line says the datasheet is used.
    A record already in the campaign root is kept, no job run."""
    from runner.flow.empirical_peak import JOB, measure_empirical_peak

    rnd, _ = gpu_round(tiny_copy, tmp_path / "round")
    kept = rnd.campaign.root / "empirical_peak.json"
    with rnd.lineage.worktree(rnd.lineage.head()) as tree:
        (line,) = measure_empirical_peak(rnd, tree)
        assert line.startswith("empirical peak not measured (exit 1, see ")
        assert "uses the datasheet's peaks" in line and str(kept) in line
        assert not kept.exists()
        log = (rnd.tmp / JOB / "test.log").read_text(encoding="utf-8")
        assert "runner.worker.bench.empirical_peak" in log
        kept.write_text('{"gpu": "NVIDIA H200", "tflops": {"bf16": 700.0}}', encoding="utf-8")
        shutil.rmtree(rnd.tmp / JOB)
        assert measure_empirical_peak(rnd, tree) == [
            "empirical peak kept from empirical_peak.json (measured before on this campaign)"
        ]
        assert not (rnd.tmp / JOB).exists()


# A thread the candidate's GEMM module starts at import: it stamps the time every 2 ms
# (as a change that keeps a core busy to slow the other role would run).
TICKER = """
import threading as _threading, time as _time

def _tick():
    with open({path!r}, "a", encoding="utf-8") as out:
        while True:
            out.write(f"{{_time.time()}}\\n")
            out.flush()
            _time.sleep(0.002)

_threading.Thread(target=_tick, daemon=True).start()
"""


@pytest.mark.integration
def test_no_thread_of_one_role_runs_during_the_other_role_s_turns(tmp_path: Path) -> None:
    """Each timed turn stops every other worker of the wave whole (SIGSTOP to its process
    group) and continues it after: the candidate's ticking thread never stamps inside an
    incumbent's turn, and it does stamp between turns (it was continued)."""
    host, tree = example_host(tmp_path)
    cand = tmp_path / "cand"
    shutil.copytree(tree, cand)
    ticks = tmp_path / "ticks.txt"
    op = cand / "turbo_kernels" / "pytorch" / "ops" / "gemm.py"
    op.write_text(op.read_text(encoding="utf-8") + TICKER.format(path=str(ticks)))
    trees = {"incumbent": tree, "candidate": cand}
    measure_paired(
        host, trees, [Shape("s1", 64, 256, 256)], ["incumbent", "candidate"], pairs=1, groups=3
    )
    stamps = [float(x) for x in ticks.read_text(encoding="utf-8").split()]
    turns = [json.loads(line) for line in (host.tmp / "turns.jsonl").read_text().splitlines()]
    incumbent = [(t["start"], t["end"]) for t in turns if "incumbent" in t["worker"]]
    assert len(incumbent) == 6 and len(stamps) > 50  # A B B A, three groups
    inside = [s for s in stamps for a, b in incumbent if a < s < b]
    assert inside == [], f"{len(inside)} ticks of the candidate inside the incumbent's turns"
    span = sum(b - a for a, b in incumbent)
    assert span > 0.05, f"the incumbent's turns took {span:.3f} s: too short to tell"
    assert alive(host.tmp) == []
