"""The host owns every number the gate reads (docs/reliability.md §7).

A serving worker tells the host each turn's per-shape medians as the turn ends
(``BlockDone.timings``) and hands over its CSV rows and ``samples.json`` in its last
reply (``Finished``); it writes neither file.  Here the host checks that what the worker
hands over is what it told turn by turn (every block's median in the samples, each
row's time the median over them), writes ``benchmark.csv`` and ``samples.json`` into
the worker's folder itself after the worker has exited, and keeps the blob id of each
(``host-records/<worker>.json`` in the round's scratch folder, which no job may
write).  ``rewritten`` then finds a record that changed after the host wrote it.

Whatever breaks that is ``Tampered`` and names the guard, ``host-owned records``: a
worker whose rows or samples differ from its turns, a worker that wrote a record file
of its own, a record rewritten after the host wrote it.

Host-side, pydantic-free and torch-free.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.artifact_names import BENCHMARK_CSV, SAMPLES
from runner.core.csv_io import write_csv
from runner.core.csv_schema import BACKWARD_TIME, get_schema
from runner.core.errors import Tampered
from runner.core.files import blob_hash, read_json, write_json_atomic
from runner.core.stats import median
from runner.core.worker_messages import BlockDone, Finished

GUARD = "host-owned records"
RECORDS_DIR = "host-records"  # in the round's scratch folder: blob ids the host wrote
FORWARD_TIME = "Forward Time (ms)"
TOLERANCE = 1e-9  # relative: the same float computed twice, through JSON


@dataclass
class TurnTimes:
    """One worker's per-shape (forward, backward) medians, turn by turn, as told."""

    told: dict[str, list[tuple[float | None, float | None]]] = field(default_factory=dict)

    def add(self, reply: BlockDone) -> None:
        for label, pair in reply.timings.items():
            self.told.setdefault(label, []).append(pair)


def refused(problems: list[str]) -> Tampered:
    return Tampered(
        f"{GUARD}: a worker's numbers are not the ones it reported turn by turn, so the "
        "round is FAILED and nothing was judged:\n  "
        + "\n  ".join(problems)
        + "\nthe measured code changed the records the gate reads; review the candidate "
        "patch before measuring it again (docs/reliability.md §7)",
        guard=GUARD,
        problems=problems,
    )


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=TOLERANCE, abs_tol=0.0)


def _block_medians(record: object) -> list[float] | None:
    """The per-block medians a samples entry (``Timing.to_dict`` over blocks) holds."""
    if not isinstance(record, dict):
        return None
    blocks = (record.get("extra") or {}).get("blocks")
    if not isinstance(blocks, list):
        return None
    return [float(b.get("median_ms", math.nan)) for b in blocks if isinstance(b, dict)]


def _shape_problems(
    name: str,
    label: str,
    row: Mapping[str, object],
    shape: object,
    told: list[tuple[float | None, float | None]],
) -> list[str]:
    """Where shape ``label``'s row or samples differ from the turns ``told``."""
    problems = []
    for i, (column, key) in enumerate(((FORWARD_TIME, "forward"), (BACKWARD_TIME, "backward"))):
        turns = [v for t in told if (v := t[i]) is not None]
        if not turns:
            continue
        blocks = _block_medians(shape.get(key) if isinstance(shape, dict) else None)
        if blocks is None or len(blocks) != len(turns) or not all(map(_same, blocks, turns)):
            problems.append(
                f"{name} {label}: its samples' {key} blocks {blocks} are not the "
                f"{len(turns)} turn medians it reported {turns}"
            )
        value = row.get(column)
        want = median(turns)
        if not isinstance(value, (int, float)) or not _same(float(value), want):
            problems.append(
                f"{name} {label}: its row's {column} {value} is not the median "
                f"{want:.6g} of the turns it reported"
            )
    return problems


def check_finished(name: str, finished: Finished, turns: TurnTimes) -> list[str]:
    """What in ``finished`` differs from the turns the worker reported (empty: none)."""
    shapes = finished.samples.get("shapes")
    if not isinstance(shapes, dict):
        return [f"{name} handed over no samples"]
    rows = {str(r.get("label")): r for r in finished.rows}
    problems = []
    for label, told in sorted(turns.told.items()):
        if label not in rows:
            problems.append(f"{name} {label}: measured in its turns but no row handed over")
            continue
        problems += _shape_problems(name, label, rows[label], shapes.get(label), told)
    return problems


def write_records(tmp: Path, name: str, out_dir: Path, finished: Finished) -> None:
    """``benchmark.csv`` and ``samples.json`` written by the host into ``out_dir`` (the
    worker has exited), their blob ids kept in ``tmp/host-records/<name>.json``.  A
    record file the worker left there itself is refused."""
    own = [f for f in (BENCHMARK_CSV, SAMPLES) if (out_dir / f).exists()]
    if own:
        raise refused([f"{name} wrote {', '.join(own)} itself; only the host writes them"])
    write_csv(out_dir / BENCHMARK_CSV, get_schema(finished.schema), list(finished.rows))
    write_json_atomic(out_dir / SAMPLES, finished.samples)
    blobs = {f: blob_hash((out_dir / f).read_bytes()) for f in (BENCHMARK_CSV, SAMPLES)}
    write_json_atomic(tmp / RECORDS_DIR / f"{name}.json", {"folder": str(out_dir), **blobs})


def rewritten(tmp: Path) -> list[str]:
    """Each record the host wrote into a worker's folder (``write_records``) whose bytes
    changed since, in words naming the guard."""
    problems = []
    for kept in sorted((tmp / RECORDS_DIR).glob("*.json")):
        data = read_json(kept)
        if not isinstance(data, dict):
            continue
        folder = Path(str(data.get("folder")))
        for f in (BENCHMARK_CSV, SAMPLES):
            try:
                now = blob_hash((folder / f).read_bytes())
            except OSError:
                now = "(gone)"
            if now != data.get(f):
                problems.append(f"{folder.name}/{f} changed after the host wrote it ({GUARD})")
    return problems
