"""Full validation sharded across several GPUs of one host (``--gpus 0,1,...``).

The shapes are split into one shard per GPU (greedy largest-first on each shape's
cost, deterministic): its measured seconds from the baseline when recorded
(``seconds_cost``; a shape's cost is mostly its timing budget, not its FLOPs), else its
FLOPs.  Each GPU then runs the whole paired pattern (B C C B ...) for its own
shapes, one thread per GPU, every pass a fresh worker pinned to that GPU through its
visibility variables.  So every incumbent/candidate comparison stays paired on one
GPU; only different shapes run side by side.  Afterwards the per-shard pinned CSVs of
each pass are merged into one pinned CSV in the original shape order, at the place an
unsharded pass would have written it (``<tmp>/pass-NN-<role>/benchmark.csv``), so the
gate reads sharded and unsharded rounds the same way.

Host-side and worker-safe: no pydantic, no torch (``benchmarks/sharded_speedup.py``
runs it on a GPU box without pydantic).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from runner.core.artifact_names import BENCHMARK_CSV, PROVENANCE, SAMPLES
from runner.core.csv_io import check_header, read_csv, write_csv
from runner.core.csv_schema import BenchCSV, Row
from runner.core.device_memory import oom_error
from runner.core.errors import ConfigError, MeasurementFailed
from runner.core.files import write_json_atomic
from runner.core.samples import Samples, samples_beside
from runner.core.shapes import Shape
from runner.executors.base import JobOutcome
from runner.executors.gpus import Vendor, detect_vendor, gpu_env
from runner.measure.host import Host, run_job

T = TypeVar("T")
BCCB: tuple[str, ...] = ("incumbent", "candidate", "candidate", "incumbent")


# ---- splitting -----------------------------------------------------------------------
def flops_cost(shape: Shape) -> float:
    """Forward plus backward FLOPs (backward = 2x forward for a GEMM)."""
    return 3.0 * shape.flops_fwd


def seconds_cost(seconds: Mapping[str, float]) -> Callable[[Shape], float]:
    """A shape's cost as its measured seconds (``manifest.shape_seconds``, recorded at
    the baseline).  A shape without a record costs the median recorded shape; with no
    record at all, this is ``flops_cost``."""
    known = sorted(v for v in seconds.values() if v > 0)
    if not known:
        return flops_cost
    typical = known[len(known) // 2]

    def cost(shape: Shape) -> float:
        value = seconds.get(shape.label, 0.0)
        return value if value > 0 else typical

    return cost


def shard_shapes(
    shapes: Sequence[Shape], n: int, *, cost: Callable[[Shape], float] = flops_cost
) -> list[list[Shape]]:
    """Split ``shapes`` into ``n`` shards of balanced total cost.

    Greedy largest-first (LPT): shapes by decreasing cost (ties: original order) each
    go to the shard with the least cost so far (ties: fewer shapes, then the lower
    index).  Deterministic.  Each shard keeps the original relative order; a shard
    may be empty when there are fewer shapes than shards.
    """
    if n < 1:
        raise ConfigError(f"cannot split shapes into {n} shards: give at least one GPU")
    labels = [s.label for s in shapes]
    if len(set(labels)) != len(labels):
        raise ConfigError(f"shape labels must be unique to shard them: {labels}")
    order = sorted(range(len(shapes)), key=lambda i: (-cost(shapes[i]), i))
    loads = [0.0] * n
    members: list[list[int]] = [[] for _ in range(n)]
    for i in order:
        target = min(range(n), key=lambda k: (loads[k], len(members[k]), k))
        loads[target] += cost(shapes[i])
        members[target].append(i)
    return [[shapes[i] for i in sorted(m)] for m in members]


# ---- running -------------------------------------------------------------------------
def run_sharded(fn: Callable[[int, int], T], gpus: Sequence[int]) -> list[T]:
    """``fn(shard_index, gpu)`` for every GPU at once, one thread each; the results
    in shard order.  Every thread runs to its end; the first exception is re-raised."""
    if not gpus:
        raise ConfigError("no GPUs to shard over: pass --gpus, e.g. 0,1")
    with ThreadPoolExecutor(max_workers=len(gpus), thread_name_prefix="shard") as pool:
        futures = [pool.submit(fn, k, gpu) for k, gpu in enumerate(gpus)]
        errors = [f.exception() for f in futures]
    for error in errors:
        if error is not None:
            raise error
    return [f.result() for f in futures]


def pass_name(index: int, role: str) -> str:
    """The name of pass ``index`` as every measurement path spells it."""
    return f"pass-{index:02d}-{role}"


def _run_shard(
    host: Host,
    trees: Mapping[str, Path],
    shapes: list[Shape],
    passes: Sequence[tuple[int, str]],
    gpu: int,
    env: Mapping[str, str],
) -> list[Path]:
    """The whole pass sequence for one shard on one GPU; one CSV per pass."""
    paths = []
    for index, role in passes:
        name = f"{pass_name(index, role)}-gpu{gpu}"
        outcome = run_job(
            host, name, host.template.for_pass(role, index, shapes), trees[role], env=env, gpu=gpu
        )
        if not outcome.ok:
            raise failed_worker(name, outcome, f" on GPU {gpu}")
        paths.append(outcome.out_dir / BENCHMARK_CSV)
    return paths


def failed_worker(name: str, outcome: JobOutcome, where: str = "") -> MeasurementFailed:
    """The error of a worker job that did not succeed: ``DeviceOutOfMemory`` (with the
    figure) when its device ran out of memory, else ``MeasurementFailed``."""
    oom = oom_error(Path(outcome.out_dir), name + where, outcome.log_path)
    if oom is not None:
        return oom
    return MeasurementFailed(worker_failure(name, outcome) + where, outcome.log_path)


def refusal(name: str, out_dir: Path) -> str | None:
    """Why worker ``name`` refused to measure, from its provenance record in ``out_dir``
    (the target came from outside the tree under test); None where it did not."""
    record = out_dir / PROVENANCE
    if not record.is_file():
        return None
    error = json.loads(record.read_text(encoding="utf-8")).get("error")
    return f"worker {name} refused to measure: {error}" if error else None


def worker_failure(name: str, outcome: JobOutcome) -> str:
    """The worker's refusal to measure, else its exit status."""
    refused = refusal(name, Path(outcome.out_dir))
    return refused or f"worker {name} failed (exit {outcome.returncode})"


def measure_sharded(
    host: Host,
    trees: Mapping[str, Path],
    shapes: Sequence[Shape],
    gpus: Sequence[int],
    *,
    pattern: Sequence[str] = BCCB,
    blocks: int = 1,
    start_index: int = 0,
    pinned: str | None = None,
    vendor: Vendor | None = None,
    cost: Callable[[Shape], float] = flops_cost,
) -> dict[str, list[Path]]:
    """Run ``blocks`` x ``pattern`` passes, every shard on its own GPU, and merge.

    ``trees`` maps each role of ``pattern`` to its source tree.  Pass numbers continue
    from ``start_index`` (the first pass is ``start_index + 1``), as in
    ``runner.compare.loop.measure_roles``.  Returns, per role, the merged pinned CSV of
    each of its passes in order: the lists ``runner.compare.loop.judge`` takes.  Raises
    MeasurementFailed when any worker failed (the other GPUs finish their passes first).
    """
    missing = sorted(set(pattern) - set(trees))
    if missing:
        raise ConfigError(f"no source tree for role(s) {missing}")
    shards = [s for s in shard_shapes(shapes, len(gpus), cost=cost) if s]
    used = list(gpus)[: len(shards)]
    roles = [role for _ in range(blocks) for role in pattern]
    passes = [(start_index + i, role) for i, role in enumerate(roles, start=1)]
    chosen = vendor or detect_vendor()

    def shard(k: int, gpu: int) -> list[Path]:
        return _run_shard(host, trees, shards[k], passes, gpu, gpu_env(gpu, chosen))

    per_shard = run_sharded(shard, used)
    return merge_passes(host.tmp, passes, per_shard, [s.label for s in shapes], pinned)


# ---- merging -------------------------------------------------------------------------
def merge_passes(
    tmp: Path,
    passes: Sequence[tuple[int, str]],
    per_shard: Sequence[Sequence[Path]],
    order: Sequence[str],
    pinned: str | None = None,
) -> dict[str, list[Path]]:
    """Each pass of ``passes`` ((index, role), in order) merged from its shards' CSVs
    (``per_shard[k][p]``: shard k's CSV of pass p) into ``tmp/<pass>/benchmark.csv``
    (``write_shard_merge``); per role, its merged CSVs in pass order."""
    merged: dict[str, list[Path]] = {}
    for p, (index, role) in enumerate(passes):
        dest = tmp / pass_name(index, role) / BENCHMARK_CSV
        write_shard_merge(dest, [paths[p] for paths in per_shard], order, pinned)
        merged.setdefault(role, []).append(dest)
    return merged


def merge_shard_csvs(
    shard_csv_paths: Sequence[Path], order: Sequence[str], pinned: str | None = None
) -> tuple[BenchCSV, list[Row]]:
    """The rows of all shards in ``order`` (the original shape labels).

    Every shard's header must equal the first one's (and ``pinned`` when given) byte
    for byte, else SchemaDriftError; every label of ``order`` must come from exactly
    one shard and no shard may hold another label, else ConfigError.  Returns the
    first shard (for its schema and header) and the ordered rows.
    """
    if not shard_csv_paths:
        raise ConfigError("no shard CSVs to merge")
    csvs = [read_csv(p, pinned=pinned) for p in shard_csv_paths]
    first = csvs[0]
    by_label: dict[str, Row] = {}
    for csv in csvs:
        check_header(csv.header, first.header, source=str(csv.path))
        for row in csv.rows:
            if row.label in by_label:
                raise ConfigError(f"shape {row.label!r} is in more than one shard ({csv.path})")
            by_label[row.label] = row
    missing = [label for label in order if label not in by_label]
    extra = sorted(set(by_label) - set(order))
    if missing or extra:
        raise ConfigError(
            f"shard CSVs do not cover the shapes: missing {missing}, unexpected {extra}"
        )
    return first, [by_label[label] for label in order]


def write_shard_merge(
    dest: Path, shard_csv_paths: Sequence[Path], order: Sequence[str], pinned: str | None = None
) -> BenchCSV:
    """Merge the shards (``merge_shard_csvs``) into one pinned CSV at ``dest``; cells
    are copied as text, so every number is bit-identical to the shard's."""
    first, rows = merge_shard_csvs(shard_csv_paths, order, pinned)
    dest.parent.mkdir(parents=True, exist_ok=True)
    write_csv(dest, first.schema, [dict(row.values) for row in rows])
    merge_shard_samples(dest.parent / SAMPLES, shard_csv_paths)
    return read_csv(dest, pinned=first.header)


def merge_shard_samples(dest: Path, shard_csv_paths: Sequence[Path]) -> None:
    """The shards' ``samples.json`` (beside each shard CSV) as one, so what is read per
    pass (fresh-step times, state probes, check problems, seconds per shape) sees every
    shape of a sharded pass: the shapes' records side by side, the first shard's spec,
    and where each shard's record came from."""
    merged: Samples = {"spec": None, "shapes": {}, "shards": []}
    for csv_path in shard_csv_paths:
        data = samples_beside(Path(csv_path))
        if data is None:
            continue
        merged["spec"] = merged["spec"] or data.get("spec")
        merged["shapes"].update(data.get("shapes", {}))
        merged["shards"].append(str(Path(csv_path).parent / SAMPLES))
    if merged["shards"]:
        write_json_atomic(dest, merged)
