"""The report's pictures (matplotlib, Agg backend, no pyplot state).

* ``plot_rounds``: the primary metric per round (geomean over the representative
  shapes, so that quick and full rounds compare like with like), ACCEPTED and
  ROLLED BACK markers, the current-best step line and the noise band
  ``baseline x (1 +- 3 sigma_G)``.
* ``plot_shapes``: per shape, baseline against final best (bars).
* ``plot_roofline``: achieved fraction of the GPU's peak per shape; without a peak
  figure (a CPU campaign) the bars show the absolute metric and the title says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from runner.core.outcomes import RoundResult, Score, Status
from runner.render.figures import unit_of
from runner.render.markdown import aggregate_over

DPI = 100
_COLORS = {
    Status.BASELINE: "#1f77b4",
    Status.ACCEPTED: "#2ca02c",
    Status.ROLLED_BACK: "#d62728",
    Status.FAILED: "#7f7f7f",
}
_MARKERS = {Status.BASELINE: "s", Status.ACCEPTED: "o", Status.ROLLED_BACK: "v", Status.FAILED: "x"}


@dataclass(frozen=True)
class RoundPoint:
    round: int
    status: Status
    value: float | None  # chained from the paired gate ratios; None: nothing to show
    measured: float | None  # the round's own geomean as measured (drifts with the machine)


def round_points(results: Sequence[RoundResult], labels: Sequence[str]) -> list[RoundPoint]:
    """Each round on one scale: the baseline's geomean over ``labels``, times the gate's
    paired ratio of each round against its incumbent (chained over accepted rounds), so
    that machine drift between rounds does not move the points."""
    points, best = [], None
    for r in sorted(results, key=lambda r: r.round):
        measured = None if r.score.n_fail else aggregate_over(r.score, labels)
        value = None
        if r.status is Status.BASELINE:
            value = best = measured
        elif r.gate is not None and best is not None and not r.score.n_fail:
            value = best * (1 + r.gate.delta_pct / 100)
            if r.status is Status.ACCEPTED:
                best = value
        points.append(RoundPoint(r.round, r.status, value, measured))
    return points


def _save(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=DPI)
    return path


def plot_rounds(
    results: Sequence[RoundResult], labels: Sequence[str], sigma_g: float | None, path: Path
) -> Path:
    points = round_points(results, labels)
    metric = results[0].score.metric if results else "primary metric"
    fig = Figure(figsize=(10, 4.8))
    ax = fig.add_subplot()
    base = next((p.value for p in points if p.status is Status.BASELINE), None)
    if base is not None and sigma_g:
        lo, hi = base * (1 - 3 * sigma_g), base * (1 + 3 * sigma_g)
        ax.axhspan(lo, hi, color="#1f77b4", alpha=0.15, label=f"noise band ±3σ_G ({sigma_g:.2%})")
    if base is not None:
        ax.axhline(base, color="#1f77b4", linewidth=1, linestyle=":", label="baseline")
    _best_line(ax, points)
    floor = min((p.value for p in points if p.value), default=0.0)
    for status in Status:
        xs = [p.round for p in points if p.status is status]
        ys = [
            p.value if p.value is not None else floor * 0.98 for p in points if p.status is status
        ]
        if xs:
            ax.scatter(
                xs,
                ys,
                s=70,
                marker=_MARKERS[status],
                color=_COLORS[status],
                label=status.value,
                zorder=3,
            )
    raw = [(p.round, p.measured) for p in points if p.measured is not None]
    if raw:
        ax.scatter(
            [x for x, _ in raw],
            [y for _, y in raw],
            s=25,
            facecolors="none",
            edgecolors="#999999",
            label="as measured (unpaired)",
            zorder=2,
        )
    ax.set_xlabel("round")
    ax.set_ylabel(metric)
    ax.set_xticks([p.round for p in points])
    ax.set_title(
        f"{metric} per round: geomean over {len(labels)} representative shapes, "
        "chained from paired gate ratios",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _best_line(ax: Axes, points: Sequence[RoundPoint]) -> None:
    xs, ys, best = [], [], None
    for p in points:
        if p.status in (Status.BASELINE, Status.ACCEPTED) and p.value is not None:
            best = p.value
        if best is not None:
            xs.append(p.round)
            ys.append(best)
    if xs:
        ax.step(xs, ys, where="post", color="#2ca02c", linewidth=1.5, label="current best")


def plot_shapes(baseline: Score, best: Score, title: str, path: Path) -> Path:
    best_by = best.by_label()
    labels = [s.label for s in baseline.shapes if s.label in best_by]
    base_vals = [_value(baseline, lb) for lb in labels]
    best_vals = [_value(best, lb) for lb in labels]
    fig = Figure(figsize=(max(8, 0.9 * len(labels) + 3), 5))
    ax = fig.add_subplot()
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], base_vals, width=0.4, label="baseline", color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], best_vals, width=0.4, label="final best", color="#2ca02c")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(baseline.metric)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path)


def _value(score: Score, label: str) -> float:
    s = score.by_label().get(label)
    return s.value if s is not None and s.value is not None else 0.0


def plot_roofline(score: Score, peak: float | None, gpu: str, dtype: str, path: Path) -> Path:
    labels = [s.label for s in score.shapes]
    values = [_value(score, lb) for lb in labels]
    unit = unit_of(score.metric)
    fig = Figure(figsize=(max(8, 0.9 * len(labels) + 3), 5))
    ax = fig.add_subplot()
    if peak:
        fractions = [100.0 * v / peak for v in values]
        ax.bar(labels, fractions, color="#9467bd")
        ax.axhline(100.0, color="#d62728", linestyle="--", linewidth=1, label="peak")
        ax.set_ylabel(f"% of {gpu} {dtype} peak ({peak:g} {unit})")
        ax.set_title(f"Achieved fraction of GPU peak per shape ({score.metric})")
        ax.legend(fontsize=8)
    else:
        ax.bar(labels, values, color="#9467bd")
        ax.set_ylabel(score.metric)
        ax.set_title(f"Achieved {score.metric} per shape — no peak known for {gpu}")
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path)
