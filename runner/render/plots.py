"""The report's pictures (matplotlib, Agg backend, no pyplot state); figures of the
metric in the unit that fits their size (``runner.render.figures``: GFLOPS on a CPU).

* ``plot_rounds``: the primary metric per round (geomean over the representative
  shapes, so that quick and full rounds compare like with like), ACCEPTED and
  ROLLED BACK markers with the 95% interval of their paired gain as error bars, the
  current-best step line and the bar a candidate had to clear (current best x (1 +
  threshold)); the axis fits the points, not a noise band.
* ``plot_shape_trend``: per shape, its value against the baseline across the rounds,
  chained from the paired per-shape changes, with their 95% intervals.
* ``plot_noise``: per round, the gain of each interleaved pair, their mean with its
  95% interval and the acceptance threshold: how noisy each round's evidence was.
* ``plot_shapes``: per shape, baseline against final best (bars).
* ``plot_roofline``: achieved fraction of the GPU's peak per shape (only drawn when a
  peak is known: a CPU campaign has none).

Each returns the PNG's bytes: ``runner.flow.report`` writes them.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass, replace

import matplotlib

matplotlib.use("Agg")

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from runner.core.outcomes import RoundResult, Score, Status
from runner.render.figures import pair_spread, scale_for, score_scale, unit_of
from runner.render.markdown import aggregate_over
from runner.render.report_rounds import paired_change

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
    error: float = 0.0  # the 95% half-width of the paired gain, in the metric's unit
    bar: float | None = None  # the incumbent x (1 + threshold): what the round had to clear


def round_points(results: Sequence[RoundResult], labels: Sequence[str]) -> list[RoundPoint]:
    """Each round on one scale: the baseline's geomean over ``labels``, times the gate's
    paired ratio of each round against its incumbent (chained over accepted rounds), so
    that machine drift between rounds does not move the points."""
    points, best = [], None
    for r in sorted(results, key=lambda r: r.round):
        measured = None if r.score.n_fail else aggregate_over(r.score, labels)
        value, error, bar = None, 0.0, None
        if r.status is Status.BASELINE:
            value = best = measured
        elif r.gate is not None and best is not None and not r.score.n_fail:
            value = best * (1 + r.gate.delta_pct / 100)
            spread = pair_spread(r.gate)
            error = best * spread[0] / 100 if spread else 0.0
            if r.gate.threshold_pct is not None:
                bar = best * (1 + r.gate.threshold_pct / 100)
            if r.status is Status.ACCEPTED:
                best = value
        points.append(RoundPoint(r.round, r.status, value, measured, error, bar))
    return points


def _png(fig: Figure) -> bytes:
    out = io.BytesIO()
    fig.savefig(out, format="png", dpi=DPI, bbox_inches="tight")  # rotated labels stay inside
    return out.getvalue()


def _scaled(p: RoundPoint, factor: float) -> RoundPoint:
    def times(x: float | None) -> float | None:
        return None if x is None else x * factor

    return replace(
        p,
        value=times(p.value),
        measured=times(p.measured),
        error=p.error * factor,
        bar=times(p.bar),
    )


def plot_rounds(results: Sequence[RoundResult], labels: Sequence[str]) -> bytes:
    raw_points = round_points(results, labels)
    base_metric = results[0].score.metric if results else "primary metric"
    scale = scale_for(base_metric, [p.value for p in raw_points] + [p.measured for p in raw_points])
    points = [_scaled(p, scale.factor) for p in raw_points]  # GFLOPS on a CPU, TFLOPS on a GPU
    metric = scale.label(base_metric)
    fig = Figure(figsize=(10, 4.8))
    ax = fig.add_subplot()
    base = next((p.value for p in points if p.status is Status.BASELINE), None)
    if base is not None:
        ax.axhline(base, color="#1f77b4", linewidth=1, linestyle=":", label="baseline")
    _best_line(ax, points)
    bars = [(p.round, p.bar) for p in points if p.bar is not None]
    if bars:
        ax.scatter(
            [x for x, _ in bars],
            [y for _, y in bars],
            marker="_",
            s=400,
            color="#ff7f0e",
            label="to clear: incumbent x (1 + threshold)",
            zorder=2,
        )
    floor = min((p.value for p in points if p.value), default=0.0)
    for status in Status:
        own = [p for p in points if p.status is status]
        if own:
            ax.errorbar(
                [p.round for p in own],
                [p.value if p.value is not None else floor * 0.98 for p in own],
                yerr=[p.error for p in own],
                fmt=_MARKERS[status],
                markersize=8,
                capsize=4,
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
        "chained from paired gate ratios (error bars: 95% interval)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


TrendPoint = tuple[int, float, float, Status]  # round, % of baseline, 95% half-width, status


def shape_trend(results: Sequence[RoundResult]) -> dict[str, list[TrendPoint]]:
    """Per shape: (round, % of the baseline, 95% half-width in points, status) for each
    measured round, chained from the paired per-shape changes over accepted rounds."""
    ordered = sorted(results, key=lambda r: r.round)
    labels = [s.label for s in ordered[0].score.shapes] if ordered else []
    trend: dict[str, list[TrendPoint]] = {lb: [] for lb in labels}
    for label in labels:
        best = 100.0
        for r in ordered:
            if r.status is Status.BASELINE:
                trend[label].append((r.round, best, 0.0, r.status))
                continue
            pct, half, _ = paired_change(r, label)
            if pct is None:
                continue
            value = best * (1 + pct / 100)
            trend[label].append((r.round, value, best * (half or 0.0) / 100, r.status))
            if r.status is Status.ACCEPTED:
                best = value
    return trend


def plot_shape_trend(results: Sequence[RoundResult]) -> bytes:
    fig = Figure(figsize=(10, 4.8))
    ax = fig.add_subplot()
    for label, pts in shape_trend(results).items():
        kept = [p for p in pts if p[3] in (Status.BASELINE, Status.ACCEPTED)]
        (line,) = ax.plot([p[0] for p in kept], [p[1] for p in kept], marker="o", label=label)
        ax.errorbar(
            [p[0] for p in pts],
            [p[1] for p in pts],
            yerr=[p[2] for p in pts],
            fmt="none",
            ecolor=line.get_color(),
            capsize=3,
        )
        gone = [p for p in pts if p[3] is Status.ROLLED_BACK]
        ax.scatter(
            [p[0] for p in gone],
            [p[1] for p in gone],
            marker="v",
            s=50,
            facecolors="none",
            edgecolors=line.get_color(),
        )
    ax.axhline(100.0, color="#999999", linewidth=1, linestyle=":")
    ax.set_xlabel("round")
    ax.set_ylabel("% of the baseline (paired, chained)")
    ax.set_xticks(sorted({r.round for r in results}))
    ax.set_title(
        "Per-shape trend: accepted rounds joined, rolled back (▽) where they landed; "
        "error bars: 95% interval",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    return _png(fig)


def plot_noise(results: Sequence[RoundResult]) -> bytes:
    fig = Figure(figsize=(10, 4.2))
    ax = fig.add_subplot()
    judged = [r for r in sorted(results, key=lambda r: r.round) if r.gate is not None]
    for r in judged:
        gate = r.gate
        assert gate is not None
        gains = gate.pair_gains_pct
        if gains:
            ax.scatter([r.round] * len(gains), gains, s=18, color="#7f7f7f", alpha=0.7, zorder=2)
        spread = pair_spread(gate)
        ax.errorbar(
            [r.round],
            [gate.delta_pct],
            yerr=[spread[0] if spread else 0.0],
            fmt=_MARKERS[r.status],
            markersize=8,
            capsize=5,
            color=_COLORS[r.status],
            zorder=3,
        )
        if gate.threshold_pct is not None:
            ax.hlines(gate.threshold_pct, r.round - 0.3, r.round + 0.3, color="#ff7f0e")
    ax.axhline(0.0, color="#999999", linewidth=1, linestyle=":")
    ax.set_xlabel("round")
    ax.set_ylabel("paired gain vs incumbent (%)")
    ax.set_xticks([r.round for r in judged])
    ax.set_title(
        "Noise per round: each pair's gain (grey), the mean with its 95% interval, "
        "the acceptance threshold (orange)",
        fontsize=10,
    )
    ax.grid(True, alpha=0.3)
    return _png(fig)


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


def plot_shapes(baseline: Score, best: Score, title: str) -> bytes:
    best_by = best.by_label()
    labels = [s.label for s in baseline.shapes if s.label in best_by]
    scale = score_scale(baseline.metric, baseline, best)
    base_vals = [_value(baseline, lb) * scale.factor for lb in labels]
    best_vals = [_value(best, lb) * scale.factor for lb in labels]
    fig = Figure(figsize=(max(8, 0.9 * len(labels) + 3), 5))
    ax = fig.add_subplot()
    xs = range(len(labels))
    ax.bar([x - 0.2 for x in xs], base_vals, width=0.4, label="baseline", color="#1f77b4")
    ax.bar([x + 0.2 for x in xs], best_vals, width=0.4, label="final best", color="#2ca02c")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel(scale.label(baseline.metric))
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _png(fig)


def _value(score: Score, label: str) -> float:
    s = score.by_label().get(label)
    return s.value if s is not None and s.value is not None else 0.0


def plot_roofline(score: Score, peak: float, gpu: str, dtype: str) -> bytes:
    labels = [s.label for s in score.shapes]
    fractions = [100.0 * _value(score, lb) / peak for lb in labels]
    unit = unit_of(score.metric)
    fig = Figure(figsize=(max(8, 0.9 * len(labels) + 3), 5))
    ax = fig.add_subplot()
    ax.bar(range(len(labels)), fractions, color="#9467bd")
    ax.axhline(100.0, color="#d62728", linestyle="--", linewidth=1, label="peak")
    ax.set_ylabel(f"% of {gpu} {dtype} peak ({peak:g} {unit})")
    ax.set_title(f"Achieved fraction of GPU peak per shape ({score.metric})")
    ax.legend(fontsize=8)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
    ax.grid(True, axis="y", alpha=0.3)
    return _png(fig)
