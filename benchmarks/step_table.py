"""Where a campaign's rounds spend their wall time: one markdown table per kind of run
(the BASELINE, quick rounds, full rounds, ``campaign accept``) with a row per step.

Reads what every run recorded (``step_times`` in ``rounds/round-N/result.json`` and in
``acceptance/acceptance.json``; ``runner.core.step_times``) and prints, per step, the
median, smallest and largest of its wall time over the runs (a step's repeats in one run
together, overlap within it counted once), its median share of its run's wall time, and
what ran beside it.  Below each table: the run's wall time against its timed work (the
turns and fresh steps of serving workers, or the passes of fresh processes), whose
ratio is what the round costs beyond measuring.  Steps beside others overlap, so the
shares do not add up to 100%.

Needs only the standard library and ``runner.core`` (no pydantic)::

    PYTHONPATH=. python3 benchmarks/step_table.py CAMPAIGN_DIR [CAMPAIGN_DIR ...] > steps.md

Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.core.step_times import StepTimes, read_step_times, union_seconds

TIMED = ("turns", "fresh steps", "fresh steps and finish", "passes")  # the measured work


@dataclass(frozen=True)
class StepRow:
    """One step over the runs of one kind."""

    name: str
    runs: int  # the runs that had it
    median_s: float
    min_s: float
    max_s: float
    share: float  # median of its seconds / its run's wall time
    beside: str  # what it ran beside, where it did


def step_seconds(times: StepTimes, name: str) -> float:
    """The wall time step ``name`` covered in one run (its repeats together)."""
    return union_seconds([s for s in times.steps if s.name == name])


def timed_seconds(times: StepTimes) -> float:
    """The wall time of the run's timed work (``TIMED``), overlap counted once."""
    return union_seconds([s for s in times.steps if s.name in TIMED])


def step_rows(runs: Sequence[StepTimes]) -> list[StepRow]:
    """A row per step named in any of ``runs``, the largest median first."""
    names = dict.fromkeys(s.name for t in runs for s in t.steps)
    rows = []
    for name in names:
        had = [t for t in runs if any(s.name == name for s in t.steps)]
        secs = [step_seconds(t, name) for t in had]
        shares = [step_seconds(t, name) / t.wall_s for t in had if t.wall_s > 0]
        beside = sorted({s.beside for t in had for s in t.steps if s.name == name} - {""})
        rows.append(
            StepRow(
                name,
                len(had),
                statistics.median(secs),
                min(secs),
                max(secs),
                statistics.median(shares) if shares else 0.0,
                ", ".join(beside),
            )
        )
    return sorted(rows, key=lambda r: -r.median_s)


def markdown(
    rows: Sequence[StepRow],
    runs: int,
    walls: Sequence[float],
    title: str,
    timed: Sequence[float] = (),
) -> str:
    """The table of ``rows`` over ``runs`` runs of wall times ``walls`` (and their
    timed work ``timed``)."""
    lines = [
        f"### {title} ({runs} run(s); wall median {statistics.median(walls):.1f} s, "
        f"{min(walls):.1f}-{max(walls):.1f} s)",
        "",
        "| step | median s | min s | max s | share of wall | beside |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.name} | {r.median_s:.1f} | {r.min_s:.1f} | {r.max_s:.1f} | "
            f"{100 * r.share:.0f}% |{' ' + r.beside if r.beside else ''} |"
        )
    ratios = [w / t for w, t in zip(walls, timed, strict=False) if t > 0]
    if ratios:
        lines += [
            "",
            f"wall / timed work ({' + '.join(TIMED)}): median "
            f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f}x); "
            f"timed work median {statistics.median(timed):.1f} s",
        ]
    else:
        lines += ["", "wall / turns: no timed work recorded"]
    return "\n".join(lines) + "\n"


def campaign_runs(root: Path) -> dict[str, list[StepTimes]]:
    """A campaign's recorded step times by kind: BASELINE, quick, full, accept."""
    kinds: dict[str, list[StepTimes]] = {"BASELINE": [], "quick": [], "full": [], "accept": []}
    for path in sorted((root / "rounds").glob("round-*/result.json")):
        doc = json.loads(path.read_text(encoding="utf-8"))
        times = read_step_times(doc.get("step_times"))
        if times is not None:
            kind = "BASELINE" if doc.get("status") == "BASELINE" else doc.get("level", "full")
            kinds.setdefault(kind, []).append(times)
    accept = root / "acceptance" / "acceptance.json"
    if accept.is_file():
        times = read_step_times(json.loads(accept.read_text(encoding="utf-8")).get("step_times"))
        if times is not None:
            kinds["accept"].append(times)
    return kinds


def report(roots: Sequence[Path]) -> str:
    runs: dict[str, list[StepTimes]] = {}
    for root in roots:
        for kind, found in campaign_runs(root).items():
            runs.setdefault(kind, []).extend(found)
    parts = [f"## Step times of {', '.join(str(r) for r in roots)}", ""]
    for kind, found in runs.items():
        if found:
            walls = [t.wall_s for t in found]
            timed = [timed_seconds(t) for t in found]
            parts.append(markdown(step_rows(found), len(found), walls, kind, timed))
    if len(parts) == 2:
        parts.append("no run recorded its step times (runs before the recorder?)\n")
    return "\n".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("campaigns", nargs="+", type=Path, help="campaign folders")
    args = parser.parse_args(argv)
    sys.stdout.write(report(args.campaigns))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
