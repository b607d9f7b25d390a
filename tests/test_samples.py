"""``samples.json`` typed (runner.core.samples): what a real worker pass writes is what
``Samples`` and ``ShapeSamples`` declare, key for key, and the host's readers read it
through ``samples_beside``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import get_type_hints

import pytest

from runner.core.artifact_names import BENCHMARK_CSV, SAMPLES
from runner.core.samples import CheckRecord, Samples, ShapeSamples, samples_beside
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, save_spec
from runner.measure.passes import check_problems, shape_seconds
from runner.measure.sharding import merge_shard_samples

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def pass_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real pass of the example package's CPU path; its CSV's path."""
    tmp_path = tmp_path_factory.mktemp("pass")
    shape = Shape("tiny-16x32x64", m=16, n=32, k=64)
    timing = TimingSettings(warmup_s=0.01, repeats=2, max_repeats=2, batch_s=0.005, budget_s=0.05)
    spec = RoundSpec(
        "samples",
        1,
        "baseline",
        1,
        "quick",
        "example",
        "gemm",
        {"backend": "TORCH"},
        (shape,),
        timing,
        device="cpu",
    )
    save_spec(tmp_path / "spec.json", spec)
    out = tmp_path / "out"
    done = subprocess.run(
        [sys.executable, "-m", "runner.worker", str(tmp_path / "spec.json"), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out / BENCHMARK_CSV


def test_a_worker_writes_what_samples_declares_and_the_host_reads_it(pass_csv: Path) -> None:
    csv = pass_csv
    samples = samples_beside(csv)
    assert samples is not None
    assert set(samples) <= set(get_type_hints(Samples))
    record = samples["shapes"]["tiny-16x32x64"]
    assert set(record) <= set(get_type_hints(ShapeSamples)), "declare the new key"
    assert {"forward", "checks", "seconds"} <= set(record)
    assert all(set(c) == set(get_type_hints(CheckRecord)) for c in record["checks"])
    assert check_problems([csv]) == []  # a clean pass
    assert set(shape_seconds([csv])) == {"tiny-16x32x64"}


def test_a_pass_without_samples_reads_as_none_and_shards_merge(
    pass_csv: Path, tmp_path: Path
) -> None:
    assert samples_beside(tmp_path / "missing" / BENCHMARK_CSV) is None
    csv = pass_csv
    other = tmp_path / "shard-2"
    other.mkdir()
    text = (csv.parent / SAMPLES).read_text(encoding="utf-8")
    (other / SAMPLES).write_text(text.replace("tiny-16x32x64", "other-shape"), encoding="utf-8")
    merged = tmp_path / "merged" / SAMPLES
    merged.parent.mkdir()
    merge_shard_samples(merged, [csv, other / BENCHMARK_CSV, tmp_path / "none" / BENCHMARK_CSV])
    got = samples_beside(merged.parent / BENCHMARK_CSV)
    assert got is not None and set(got["shapes"]) == {"tiny-16x32x64", "other-shape"}
    assert len(got["shards"]) == 2
