"""Sharding full validation over GPUs: the split, the merge, the per-GPU B C C B order,
and a real run of workers in parallel processes (CPU)."""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from pathlib import Path

import pytest

from runner.core.csv_io import read_csv, write_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import ConfigError, MeasurementFailed, SchemaDriftError
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, load_spec
from runner.executors.base import JobOutcome, WorkerJob
from runner.executors.local import LocalExecutor
from runner.measure.host import PlainHost, job_in
from runner.measure.sharding import (
    gpu_env,
    measure_sharded,
    merge_shard_csvs,
    run_sharded,
    shard_shapes,
    write_shard_merge,
)

ROOT = Path(__file__).resolve().parent.parent


def sq(label: str, n: int) -> Shape:
    return Shape(label, n, n, n)


SHAPES = [sq("a", 1024), sq("b", 4096), sq("c", 2048), sq("d", 8192), sq("e", 512), sq("f", 4096)]


# ---- split ---------------------------------------------------------------------------
def test_shard_shapes_greedy_largest_first() -> None:
    shards = shard_shapes(SHAPES, 2)
    # d (8192^3) alone outweighs all the others together: LPT gives it its own GPU.
    assert [[s.label for s in shard] for shard in shards] == [["d"], ["a", "b", "c", "e", "f"]]
    shards = shard_shapes([sq(x, 1024) for x in "abcde"], 2)  # equal costs: alternate
    assert [[s.label for s in shard] for shard in shards] == [["a", "c", "e"], ["b", "d"]]


def test_shard_shapes_balances_and_covers_everything() -> None:
    shapes = [Shape(f"s{i}", 128 * (1 + i % 7), 4096, 1024 * (1 + i % 3)) for i in range(20)]
    shards = shard_shapes(shapes, 3)
    labels = [s.label for shard in shards for s in shard]
    assert sorted(labels) == sorted(s.label for s in shapes) and len(labels) == 20
    loads = [sum(s.flops_fwd for s in shard) for shard in shards]
    assert max(loads) - min(loads) <= max(s.flops_fwd for s in shapes)  # LPT bound
    for shard in shards:  # original relative order within a shard
        assert [shapes.index(s) for s in shard] == sorted(shapes.index(s) for s in shard)
    assert shard_shapes(shapes, 3) == shards  # deterministic


def test_shard_shapes_edges() -> None:
    assert shard_shapes(SHAPES[:1], 3) == [[SHAPES[0]], [], []]
    assert shard_shapes(SHAPES, 1) == [SHAPES]
    with pytest.raises(ConfigError, match="at least one GPU"):
        shard_shapes(SHAPES, 0)
    with pytest.raises(ConfigError, match="unique"):
        shard_shapes([sq("a", 1), sq("a", 2)], 2)
    custom = shard_shapes(SHAPES, 2, cost=lambda s: 1.0)  # e.g. a fixed time per shape
    assert [len(s) for s in custom] == [3, 3]


def test_gpu_env() -> None:
    assert gpu_env(1, "nvidia") == {"CUDA_VISIBLE_DEVICES": "1"}
    assert gpu_env(3, "amd") == {
        "ROCR_VISIBLE_DEVICES": "3",
        "HIP_VISIBLE_DEVICES": "0",
        "CUDA_VISIBLE_DEVICES": "0",
    }


def test_a_gpu_worker_s_allocator_hands_memory_back() -> None:
    """NVIDIA workers get expandable segments (what a worker hands back after a turn
    then leaves it); a value the user set stands, and AMD gets nothing."""
    from runner.executors.gpus import ALLOC_CONF_ENV, allocator_env

    assert allocator_env("nvidia", {}) == {ALLOC_CONF_ENV: "expandable_segments:True"}
    assert allocator_env("nvidia", {ALLOC_CONF_ENV: "max_split_size_mb:512"}) == {}
    assert allocator_env("amd", {}) == {}


def test_a_gpu_round_s_worker_jobs_carry_the_allocator_setting(tmp_path: Path) -> None:
    from campaign_helpers import tiny_campaign

    from runner.executors.factory import make_executor
    from runner.executors.gpus import ALLOC_CONF_ENV, allocator_env, detect_vendor
    from runner.round.context import RoundPlan

    camp = tiny_campaign(tmp_path, "alloc", baseline=False)
    tree = Path(camp.manifest.source)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rnd = RoundPlan(camp, make_executor(camp.manifest), lambda _m: None, scratch, 2, "quick", ())
    job = rnd.worker_job("pass-01-incumbent", rnd.template.for_pass("incumbent", 1, []), tree)
    assert ALLOC_CONF_ENV not in job.env  # a CPU campaign: nothing to set
    camp.manifest = camp.manifest.model_copy(update={"target_gpu": "gfx942"})
    gpu = RoundPlan(camp, make_executor(camp.manifest), lambda _m: None, scratch, 2, "quick", ())
    job = gpu.worker_job("pass-01-incumbent", gpu.template.for_pass("incumbent", 1, []), tree)
    wanted = allocator_env(detect_vendor())
    assert {k: job.env[k] for k in wanted} == wanted


# ---- merge ---------------------------------------------------------------------------
def row(label: str, tflops: float) -> dict[str, object]:
    values: dict[str, object] = {c: None for c in GEMM_SCHEMA.columns}
    values.update({"label": label, "B": 1, "M": 16, "N": 64, "K": 64, "Check": "PASS"})
    values.update({"Forward TFLOPS": tflops, "Forward TFLOPS_stddev": 0.01})
    values.update({"Forward Time (ms)": 1.0 / tflops, "out_snr": 40.0})
    return values


def shard_csv(path: Path, labels: list[str], header: str | None = None) -> Path:
    write_csv(path, GEMM_SCHEMA, [row(label, 1.0 + 0.1 * i) for i, label in enumerate(labels)])
    if header is not None:
        text = path.read_text().split("\n", 1)[1]
        path.write_text(header + "\n" + text)
    return path


def test_merge_restores_the_original_order_bit_for_bit(tmp_path: Path) -> None:
    a = shard_csv(tmp_path / "a.csv", ["d", "b"])
    b = shard_csv(tmp_path / "b.csv", ["a", "c"])
    first, rows = merge_shard_csvs([a, b], ["a", "b", "c", "d"])
    assert [r.label for r in rows] == ["a", "b", "c", "d"]
    merged = write_shard_merge(tmp_path / "m" / "benchmark.csv", [a, b], ["a", "b", "c", "d"])
    assert merged.header == GEMM_SCHEMA.header == first.header
    src = {r.label: r.values for c in (read_csv(a), read_csv(b)) for r in c.rows}
    assert all(r.values == src[r.label] for r in merged.rows)


def test_merge_joins_the_shards_samples(tmp_path: Path) -> None:
    """A sharded pass reads like an unsharded one: its fresh-step times, check problems
    and seconds per shape come from every shard."""
    from runner.measure.passes import check_problems, fresh_step_ms, shape_seconds

    parts = []
    for name, labels in (("s0", ["d", "b"]), ("s1", ["a", "c"])):
        csv = shard_csv(tmp_path / name / "benchmark.csv", labels)
        shapes = {
            label: {
                "seconds": 2.0,
                "fresh_step": {"median_ms": 3.0},
                "fresh_draw": None,
                "checks": [{"problems": [f"{label} is off"]}],
            }
            for label in labels
        }
        record = {"spec": {"k": name}, "shapes": shapes}
        (csv.parent / "samples.json").write_text(json.dumps(record))
        parts.append(csv)
    dest = tmp_path / "pass-01-incumbent" / "benchmark.csv"
    write_shard_merge(dest, parts, ["a", "b", "c", "d"])
    merged = json.loads((dest.parent / "samples.json").read_text())
    assert sorted(merged["shapes"]) == ["a", "b", "c", "d"] and merged["spec"] == {"k": "s0"}
    assert fresh_step_ms(dest) == {label: 3.0 for label in "abcd"}
    assert shape_seconds([dest]) == {label: 2.0 for label in "abcd"}  # counted once
    assert sorted(check_problems([dest])) == [f"{x}: {x} is off" for x in "abcd"]


def test_merge_refuses_header_drift(tmp_path: Path) -> None:
    a = shard_csv(tmp_path / "a.csv", ["a"])
    drifted = GEMM_SCHEMA.header.replace("out_snr", "Out SNR")
    b = shard_csv(tmp_path / "b.csv", ["b"], header=drifted)
    with pytest.raises(SchemaDriftError, match="renamed"):
        merge_shard_csvs([a, b], ["a", "b"], pinned=drifted)
    with pytest.raises(SchemaDriftError):
        merge_shard_csvs([a, b], ["a", "b"])


def test_merge_refuses_missing_and_duplicate_shapes(tmp_path: Path) -> None:
    a = shard_csv(tmp_path / "a.csv", ["a", "b"])
    b = shard_csv(tmp_path / "b.csv", ["b"])
    with pytest.raises(ConfigError, match="more than one shard"):
        merge_shard_csvs([a, b], ["a", "b"])
    with pytest.raises(ConfigError, match=r"missing \['c'\]"):
        merge_shard_csvs([a], ["a", "b", "c"])
    with pytest.raises(ConfigError, match=r"unexpected \['b'\]"):
        merge_shard_csvs([a], ["a"])
    with pytest.raises(ConfigError):
        merge_shard_csvs([], ["a"])


# ---- running -------------------------------------------------------------------------
def test_run_sharded_runs_in_parallel_and_reraises() -> None:
    barrier = threading.Barrier(3, timeout=10)  # deadlocks unless all three run at once

    def fn(k: int, gpu: int) -> tuple[int, int]:
        barrier.wait()
        return k, gpu

    assert run_sharded(fn, [4, 5, 6]) == [(0, 4), (1, 5), (2, 6)]
    finished: list[int] = []

    def flaky(k: int, gpu: int) -> int:
        if k == 0:
            raise RuntimeError("shard 0 broke")
        finished.append(gpu)
        return gpu

    with pytest.raises(RuntimeError, match="shard 0 broke"):
        run_sharded(flaky, [0, 1])
    assert finished == [1]  # the other GPU still finished its passes
    with pytest.raises(ConfigError):
        run_sharded(fn, [])


class FakeHost:
    """Writes a CSV for each job's shapes; records what each GPU ran, in order.  It is
    its own executor: ``run_job`` gets the job ``worker_job`` made (``job_in``)."""

    def __init__(self, tmp: Path, fail: str | None = None) -> None:
        self.tmp = tmp
        self.fail = fail
        self.calls: list[tuple[str, str, int, tuple[str, ...], str]] = []
        self.lock = threading.Lock()
        self.executor = self

    @property
    def template(self) -> RoundSpec:
        return RoundSpec("c", 2, "", 0, "full", "example", "gemm", {}, (), TimingSettings())

    def worker_job(
        self,
        name: str,
        spec: RoundSpec,
        tree: Path,
        env: Mapping[str, str] | None = None,
        gpu: int | None = None,
    ) -> WorkerJob:
        return job_in(self.tmp, name, spec, tree, dict(env or {}), gpu)

    def run_job(self, job: WorkerJob) -> JobOutcome:
        visible = job.env["CUDA_VISIBLE_DEVICES"]
        assert job.gpus == (int(visible),)  # the job is told its own device, not only its env
        spec = load_spec(job.spec_path)
        labels = tuple(s.label for s in spec.shapes)
        with self.lock:
            self.calls.append((visible, job.name, spec.pass_index, labels, job.source_dir.name))
        out = job.out_dir
        out.mkdir(parents=True)
        if job.name == self.fail:
            return JobOutcome(job.name, 3, out, out / "job.log")
        shard_csv(out / "benchmark.csv", list(labels))
        return JobOutcome(job.name, 0, out, out / "job.log")


def test_measure_sharded_pairs_every_comparison_on_one_gpu(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    trees = {"incumbent": Path("/t/inc"), "candidate": Path("/t/cand")}
    got = measure_sharded(host, trees, SHAPES, [0, 1], vendor="nvidia", blocks=1, start_index=2)
    for gpu, labels in (("0", ("d",)), ("1", ("a", "b", "c", "e", "f"))):
        mine = [c for c in host.calls if c[0] == gpu]
        assert [(c[2], c[4]) for c in mine] == [(3, "inc"), (4, "cand"), (5, "cand"), (6, "inc")]
        assert {c[3] for c in mine} == {labels}
        assert mine[0][1] == f"pass-03-incumbent-gpu{gpu}"
    assert got == {
        "incumbent": [
            tmp_path / "pass-03-incumbent" / "benchmark.csv",
            tmp_path / "pass-06-incumbent" / "benchmark.csv",
        ],
        "candidate": [
            tmp_path / "pass-04-candidate" / "benchmark.csv",
            tmp_path / "pass-05-candidate" / "benchmark.csv",
        ],
    }
    for path in got["incumbent"] + got["candidate"]:
        assert read_csv(path).labels() == [s.label for s in SHAPES]


def test_measure_sharded_extra_pairs_pattern(tmp_path: Path) -> None:
    host = FakeHost(tmp_path)
    trees = {"incumbent": Path("/t/inc"), "candidate": Path("/t/cand")}
    got = measure_sharded(
        host,
        trees,
        SHAPES[:2],
        [0, 1],
        vendor="nvidia",
        pattern=("candidate", "incumbent"),
        blocks=2,
        start_index=4,
    )
    assert [p.parent.name for p in got["candidate"]] == ["pass-05-candidate", "pass-07-candidate"]
    assert [p.parent.name for p in got["incumbent"]] == ["pass-06-incumbent", "pass-08-incumbent"]


def test_measure_sharded_failure_and_unused_gpus(tmp_path: Path) -> None:
    host = FakeHost(tmp_path, fail="pass-02-candidate-gpu1")
    trees = {"incumbent": Path("/t/inc"), "candidate": Path("/t/cand")}
    with pytest.raises(
        MeasurementFailed, match=r"pass-02-candidate-gpu1 failed \(exit 3\) on GPU 1"
    ):
        measure_sharded(host, trees, SHAPES[:2], [0, 1, 2], vendor="nvidia")
    assert {c[0] for c in host.calls} == {"0", "1"}  # two shapes: GPU 2 gets no shard
    with pytest.raises(ConfigError, match="no source tree"):
        measure_sharded(host, {"incumbent": Path("/t")}, SHAPES, [0], vendor="nvidia")


@pytest.mark.integration
def test_real_workers_sharded_over_two_devices(tmp_path: Path) -> None:
    """Real worker processes (CPU), two shards side by side, merged in order."""
    import runner.cli  # noqa: F401  (newcampaign imported first hits an import cycle)
    from runner.flow.new_campaign import fresh_example_copy

    tree = fresh_example_copy(tmp_path / "tree")
    timing = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=3, budget_s=0.05, batch_s=0.005)
    options = {"backend": "TORCH", "granularity": None}
    template = RoundSpec(
        "shard-test",
        2,
        "incumbent",
        0,
        "full",
        "example",
        "gemm",
        options,
        (),
        timing,
        device="cpu",
    )
    host = PlainHost(
        tmp_path / "round",
        LocalExecutor(),
        template,
        lambda t: {"PYTHONPATH": str(t), "TURBO_KERNELS_GEMM_BACKEND": "TORCH"},
    )
    shapes = [Shape("s1", 16, 64, 64), Shape("s2", 64, 64, 64), Shape("s3", 32, 64, 64)]
    trees = {"incumbent": tree, "candidate": tree}
    got = measure_sharded(
        host, trees, shapes, [0, 1], vendor="nvidia", pattern=("incumbent", "candidate")
    )
    for role in ("incumbent", "candidate"):
        (path,) = got[role]
        csv = read_csv(path)
        assert csv.labels() == ["s1", "s2", "s3"] and all(r.passed for r in csv.rows)
    shard_dirs = sorted(p.name for p in host.tmp.iterdir() if "-gpu" in p.name)
    assert shard_dirs == [
        "pass-01-incumbent-gpu0",
        "pass-01-incumbent-gpu1",
        "pass-02-candidate-gpu0",
        "pass-02-candidate-gpu1",
    ]
