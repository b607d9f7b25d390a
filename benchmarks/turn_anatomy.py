"""What a paired round's timed turns hold: per round, the turns' wall time split into
what each callable's measurement recorded of itself.

A turn on a GPU worker (``runner.worker.bench.serve``'s ``block``) measures every shape's
forward and backward (``runner.worker.bench.gpu.measure_gpu``).  Each measurement keeps,
in the worker's ``samples.json`` (``forward``/``backward`` -> ``extra.blocks``), its
warm-up (``extra.warmup.seconds``: from the first call through the graph capture and the
warm-up windows), its timed samples (``samples_ms`` x ``iters_per_sample``) and any wait
for thermal headroom (``extra.thermal.waited_s``).  The turns' wall time comes from the
round's ``artifacts/turns.jsonl`` (``start``/``end`` of each reply).  What is left of a
turn is neither: the sampled outputs judged against the reference, the replay check on a
negated input, the clock readings and the worker's own bookkeeping.  Each kind's warm-up
is also given in calls of the callable it warms (its seconds over the measured per-call
time, the median over its measurements): a figure of the engine's steps that compares
across machines, where seconds do not.

Needs only the standard library and ``runner.core`` (no pydantic)::

    PYTHONPATH=. python3 benchmarks/turn_anatomy.py CAMPAIGN_DIR [CAMPAIGN_DIR ...] > anatomy.md

Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.artifact_names import SAMPLES


@dataclass
class Anatomy:
    """One round's turns, summed over its workers."""

    turns: int = 0
    wall_s: float = 0.0
    warmup_s: float = 0.0
    sampled_s: float = 0.0
    thermal_s: float = 0.0
    measurements: int = 0
    stops: dict[str, int] = field(default_factory=dict)
    warm_calls: dict[str, list[float]] = field(default_factory=dict)  # per kind

    @property
    def rest_s(self) -> float:
        return self.wall_s - self.warmup_s - self.sampled_s - self.thermal_s


def turn_walls(path: Path) -> tuple[int, float]:
    """How many turns ``turns.jsonl`` recorded, and their wall time together."""
    count, wall = 0, 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        turn = json.loads(line)
        start, end = turn.get("start"), turn.get("end")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)):
            count += 1
            wall += end - start
    return count, wall


def block_records(samples: dict[str, object]) -> Iterable[tuple[str, dict[str, object]]]:
    """Every per-block measurement of a worker's ``samples.json``, with its kind."""
    shapes = samples.get("shapes")
    if not isinstance(shapes, dict):
        return
    for record in shapes.values():
        if not isinstance(record, dict):
            continue
        for kind in ("forward", "backward"):
            timing = record.get(kind)
            extra = timing.get("extra") if isinstance(timing, dict) else None
            blocks = extra.get("blocks") if isinstance(extra, dict) else None
            if isinstance(blocks, list):
                yield from ((kind, b) for b in blocks if isinstance(b, dict))


def add_block(out: Anatomy, kind: str, block: dict[str, object]) -> None:
    """``block``'s own figures (a ``kind`` measurement) into ``out``."""
    extra = block.get("extra")
    extra = extra if isinstance(extra, dict) else {}
    warm = extra.get("warmup")
    thermal = extra.get("thermal")
    samples = block.get("samples_ms")
    calls = block.get("iters_per_sample")
    out.measurements += 1
    if isinstance(warm, dict) and isinstance(warm.get("seconds"), (int, float)):
        out.warmup_s += float(warm["seconds"])
        per_call = block.get("median_ms")
        if isinstance(per_call, (int, float)) and per_call > 0:
            out.warm_calls.setdefault(kind, []).append(float(warm["seconds"]) * 1e3 / per_call)
    if isinstance(thermal, dict) and isinstance(thermal.get("waited_s"), (int, float)):
        out.thermal_s += float(thermal["waited_s"])
    if isinstance(samples, list) and isinstance(calls, int):
        out.sampled_s += sum(float(s) for s in samples) * calls / 1e3
    reason = str(block.get("stop_reason", ""))
    out.stops[reason] = out.stops.get(reason, 0) + 1


def round_anatomy(artifacts: Path) -> Anatomy | None:
    """The anatomy of the round whose artifacts folder is ``artifacts``; None when it
    kept no turns (a round of per-pass workers, or one that failed before its turns)."""
    walls = sorted(artifacts.glob("turns*.jsonl"))
    if not walls:
        return None
    out = Anatomy()
    for path in walls:
        count, wall = turn_walls(path)
        out.turns += count
        out.wall_s += wall
    for path in sorted(artifacts.rglob(SAMPLES)):
        doc = json.loads(path.read_text(encoding="utf-8"))
        for kind, block in block_records(doc):
            add_block(out, kind, block)
    return out


def markdown(rows: Sequence[tuple[str, Anatomy]]) -> str:
    lines = [
        "| round | turns | turn wall s | warm-up s | timed samples s | thermal wait s | "
        "the rest s | measurements | warm-up in calls (median) | stop reasons |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, a in rows:
        stops = ", ".join(f"{k} {v}" for k, v in sorted(a.stops.items()))
        calls = ", ".join(
            f"{k} {statistics.median(v):.1f}" for k, v in sorted(a.warm_calls.items()) if v
        )
        lines.append(
            f"| {name} | {a.turns} | {a.wall_s:.1f} | {a.warmup_s:.1f} | {a.sampled_s:.1f} | "
            f"{a.thermal_s:.1f} | {a.rest_s:.1f} | {a.measurements} | {calls} | {stops} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("campaigns", nargs="+", type=Path, help="campaign folders")
    args = parser.parse_args(argv)
    rows: list[tuple[str, Anatomy]] = []
    for root in args.campaigns:
        for round_dir in sorted((root / "rounds").glob("round-*"), key=lambda p: p.name):
            found = round_anatomy(round_dir / "artifacts")
            if found is not None:
                rows.append((f"{root.name}/{round_dir.name}", found))
    sys.stdout.write(markdown(rows) if rows else "no round kept its turns\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
