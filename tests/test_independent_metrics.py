"""Independent metrics (docs/protocol.md §5.9, upstream's "Multi-metric handling" in
optimize-loop.md at Primus-Turbo a6a16cdc): a campaign declares them in
``primary_metric`` as upstream writes several metrics, comma-separated, and every
comparison of its rounds (``runner.compare.loop.judge``) holds them to "no metric
aggregate may regress and at least one must improve".  The combination rule on recorded
figures, and the round's judge on real pass CSVs of a real campaign folder."""

from __future__ import annotations

from pathlib import Path

import pytest
from campaign_helpers import tiny_campaign

from runner.compare.loop import Comparison, judge
from runner.compare.shapes import level_shapes
from runner.core.csv_io import write_csv
from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.outcomes import Decision, PairSample, Score, ShapeScore
from runner.executors.factory import make_executor
from runner.judge.independent import decide_metrics
from runner.round.context import RoundPlan
from runner.round.result import veto_only
from runner.store.campaign import Campaign

FWD, BWD = "Forward TFLOPS", "Backward TFLOPS"
INDEPENDENT = f"{FWD}, {BWD}"


def _score(metric: str, values: dict[str, float]) -> Score:
    shapes = tuple(ShapeScore(lb, "PASS", v) for lb, v in values.items())
    agg = 1.0
    for v in values.values():
        agg *= v ** (1 / len(values))
    return Score(metric, agg, shapes, len(shapes), 0)


def _pairs(base: dict[str, float], gains: list[float]) -> list[PairSample]:
    return [PairSample(dict(base), {k: v * g for k, v in base.items()}) for g in gains]


def test_paired_readings_one_metric_clearly_down_rolls_back_one_flat_still_accepts() -> None:
    """Recorded pair readings of two shapes: forward +10% in every pair; backward either
    -3% in every pair (a fall beyond its noise: rolled back, naming it) or within
    +-0.4% of zero (no fall: accepted on forward alone)."""
    base = {"a": 100.0, "b": 200.0}
    best = {FWD: _score(FWD, base), BWD: _score(BWD, base)}
    fwd = [1.10, 1.102, 1.098, 1.101, 1.099, 1.10]
    for bwd, want in (
        ([0.97, 0.968, 0.972, 0.97, 0.969, 0.971], False),
        ([1.004, 0.996, 1.003, 0.997, 1.002, 0.998], True),
    ):
        cand = {
            FWD: _score(FWD, {k: v * 1.10 for k, v in base.items()}),
            BWD: _score(BWD, {k: v * sum(bwd) / len(bwd) for k, v in base.items()}),
        }
        pairs = {FWD: _pairs(base, fwd), BWD: _pairs(base, bwd)}
        got = decide_metrics(best, cand, pairs=pairs, sigma_g=0.005, final=True)
        assert got.decision.accepted is want, got.reasons
        if not want:
            assert got.reasons[0].endswith("regressed: Backward TFLOPS")
        else:
            assert got.reasons[0].startswith("independent metrics: improved Forward TFLOPS;")
        assert got.metric == FWD and got.reasons[1].startswith("Forward TFLOPS: ACCEPTED")


def test_neither_metric_improving_rolls_back_and_an_unclear_one_asks_for_pairs() -> None:
    base = {"a": 100.0, "b": 200.0}
    best = {FWD: _score(FWD, base), BWD: _score(BWD, base)}
    flat = [1.004, 0.996, 1.003, 0.997, 1.002, 0.998]
    cand = {FWD: _score(FWD, base), BWD: _score(BWD, base)}
    pairs = {FWD: _pairs(base, flat), BWD: _pairs(base, flat)}
    got = decide_metrics(best, cand, pairs=pairs, sigma_g=0.005, final=True)
    assert got.decision is Decision.ROLLED_BACK
    assert got.reasons[0] == "independent metrics: no metric aggregate improved (at least one must)"
    slow = {k: v * 0.99 for k, v in base.items()}
    cand = {FWD: _score(FWD, {k: v * 1.1 for k, v in base.items()}), BWD: _score(BWD, slow)}
    noisy = {FWD: _pairs(base, [1.1, 1.1, 1.1]), BWD: _pairs(base, [0.95, 1.03, 0.99])}
    got = decide_metrics(best, cand, pairs=noisy, sigma_g=0.005)
    assert got.decision is Decision.NEEDS_REMEASURE and got.more_pairs > 0
    assert "not clear yet whether Backward TFLOPS" in got.reasons[0]


def _pass(path: Path, labels: list[str], fwd: float, bwd: float) -> Path:
    rows = []
    for lb in labels:
        rows.append(
            {
                "label": lb,
                "B": 1,
                "M": 64,
                "N": 64,
                "K": 64,
                "Check": "PASS",
                "Forward TFLOPS": 100.0 * fwd,
                "Forward TFLOPS_stddev": 0.0,
                "Backward TFLOPS": 80.0 * bwd,
                "Backward TFLOPS_stddev": 0.0,
                "Forward Time (ms)": 1.0 / fwd,
                "Backward Time (ms)": 2.5 / bwd,
                "out_snr": 40.0,
                "da_snr": 40.0,
                "db_snr": 40.0,
            }
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    write_csv(path, GEMM_SCHEMA, rows)
    return path


def _judged(campaign: Campaign, tmp: Path) -> Decision:
    """Four passes a role: the candidate's forward 20% faster, its backward 3% slower in
    every pass (the combined step still gains 2.6%)."""
    labels = [s.label for s in level_shapes(campaign.manifest, "full")]
    rnd = RoundPlan(campaign, make_executor(campaign.manifest), lambda _m: None, tmp, 2, "full")
    paths = {
        "incumbent": [_pass(tmp / f"i{k}" / "benchmark.csv", labels, 1.0, 1.0) for k in range(4)],
        "candidate": [_pass(tmp / f"c{k}" / "benchmark.csv", labels, 1.2, 0.97) for k in range(4)],
    }
    got = judge(rnd, paths, Comparison(audits=False), [], final=True).gate
    return got.decision


def test_a_round_of_an_independent_metrics_campaign_is_judged_by_that_rule(
    tmp_path: Path,
) -> None:
    """The same passes: a combined-step campaign and a forward-only one accept them, a
    campaign declaring upstream's "Forward TFLOPS, Backward TFLOPS" rolls them back (the
    backward aggregate fell); the manifest keeps the declaration as written."""
    combined = tiny_campaign(tmp_path / "c", "comb", baseline=False)
    assert _judged(combined, tmp_path / "tc").accepted
    forward = tiny_campaign(tmp_path / "f", "fwd", baseline=False, primary_metric=FWD)
    assert _judged(forward, tmp_path / "tf").accepted
    independent = tiny_campaign(tmp_path / "i", "ind", baseline=False, primary_metric=INDEPENDENT)
    assert Campaign.load(independent.root).manifest.primary_metric == INDEPENDENT
    assert _judged(independent, tmp_path / "ti") is Decision.ROLLED_BACK


@pytest.mark.parametrize("metric", ["Forward GB/s, Backward GB/s", "Backward TFLOPS"])
def test_an_undeclared_metric_list_is_refused(tmp_path: Path, metric: str) -> None:
    from runner.core.errors import ConfigError

    with pytest.raises(ConfigError, match="primary_metric"):
        tiny_campaign(tmp_path, "bad", baseline=False, primary_metric=metric)


def test_a_vetoed_round_of_it_records_the_metric_its_other_rounds_show(tmp_path: Path) -> None:
    """A round vetoed before measuring records an empty score; it is on the first
    metric, the one every measured round's record shows, not on the declared list."""
    campaign = tiny_campaign(tmp_path, "ind", baseline=False, primary_metric=INDEPENDENT)
    rnd = RoundPlan(
        campaign, make_executor(campaign.manifest), lambda _m: None, tmp_path, 2, "full"
    )
    gate, inc, cand = veto_only(
        rnd, ["focused test failed"], level_shapes(campaign.manifest, "full")
    )
    assert gate.metric == inc.metric == cand.metric == FWD
