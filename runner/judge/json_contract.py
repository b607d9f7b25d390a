"""The offline JSON contracts, shared by ``campaign score/gate --json`` and the MCP tools
``score``/``gate`` (``runner.cli.mcp_server``): one function builds each object, so the two
front ends cannot drift apart.

* score: ``{"metric", "aggregate", "shapes": [{"label", "value", "check"}], "pass", "fail"}``
* gate:  ``GateResult.to_dict()`` (decision, metric, aggregates, delta, per-shape deltas,
  regressed shapes, reasons, threshold, pairs used).

Bad input raises ``ConfigError`` (or its ``SchemaDriftError``/``CsvValueError``
subclasses) with a message that says what to fix.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import cast

from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from runner.core.csv_io import MAX_CSV_LINE, check_encoding, check_same_shapes, read_csv
from runner.core.errors import ConfigError
from runner.core.files import check_regular_file
from runner.core.outcomes import GateResult, Score
from runner.judge.independent import decide_metrics
from runner.judge.scoring import INDEPENDENT, Metric, component_metrics, score


class ShapeValueJSON(TypedDict):
    """One shape of ``campaign score --json``; ``value`` is None for a FAIL row."""

    label: str
    value: float | None
    check: str


# "pass" is a keyword, hence the functional form.
ScoreJSON = TypedDict(
    "ScoreJSON",
    {
        "metric": str,
        "aggregate": float,
        "shapes": list[ShapeValueJSON],
        "pass": int,
        "fail": int,
    },
)
ScoreJSON.__doc__ = "``campaign score --json``: the metric, the geomean and the shapes."


class ShapeDeltaJSON(TypedDict):
    """One shape of ``campaign gate --json``; numbers are None where a side FAILed."""

    label: str
    best: float | None
    candidate: float | None
    delta_pct: float | None
    check: str


class GateJSON(TypedDict):
    """``campaign gate --json``: the verdict, the aggregates and why."""

    decision: str
    metric: str
    best_aggregate: float
    candidate_aggregate: float
    delta_pct: float
    shapes: list[ShapeDeltaJSON]
    regressed: list[str]
    reasons: list[str]
    threshold_pct: float | None
    pairs_used: int
    evidence: dict[str, object] | None  # the paired evidence (``runner.judge.evidence``)
    more_pairs: int  # NEEDS_REMEASURE: the fresh pairs the gate asks for next
    pair_gains_pct: list[float]


def read_pinned_header(path: str) -> str:
    """The first line of ``path`` (a header file or a pinned CSV), held to the same rules
    as every CSV (LF or CRLF; a BOM or a lone carriage return is refused:
    ``check_encoding``), reading at most ``MAX_CSV_LINE`` bytes of it (a FIFO is
    refused, never waited on)."""
    check_regular_file(Path(path), "pinned header")
    try:
        with open(path, "rb") as fh:
            raw = fh.readline(MAX_CSV_LINE + 2)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the pinned header ({exc.strerror or exc}); pass the "
            "BASELINE CSV or a file holding its header line"
        ) from None
    if len(raw.removesuffix(b"\n").removesuffix(b"\r")) > MAX_CSV_LINE:
        raise ConfigError(
            f"{path}: its first line is over {MAX_CSV_LINE} bytes, so it is not a CSV "
            "header; pass the BASELINE CSV or a file holding its header line"
        )
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 (byte {exc.start}); re-save it as UTF-8") from None
    return check_encoding(line, path).removesuffix("\n")


# ---------------------------------------------------------------- score


def score_csv(
    csv_path: str, metric: str = Metric.AUTO.value, pinned_header: str | None = None
) -> Score:
    """Read ``csv_path`` (checked against the header of ``pinned_header`` when given: a
    header file or the BASELINE CSV) and score it on ``metric``."""
    pinned = read_pinned_header(pinned_header) if pinned_header else None
    return score(read_csv(csv_path, pinned=pinned), metric)


def score_json(sc: Score) -> ScoreJSON:
    """The ``campaign score --json`` contract: label/value/check per shape."""
    return {
        "metric": sc.metric,
        "aggregate": sc.aggregate,
        "shapes": [{"label": s.label, "value": s.value, "check": s.check} for s in sc.shapes],
        "pass": sc.n_pass,
        "fail": sc.n_fail,
    }


# ---------------------------------------------------------------- gate


def gate_csvs(
    best_path: str,
    cand_path: str,
    metric: str = Metric.AUTO.value,
    sigma_g: float | None = None,
    targeted: Sequence[str] = (),
) -> GateResult:
    """Judge the candidate CSV against the best one.  The candidate must carry the best
    CSV's columns exactly (LF or CRLF either way) and is scored on the metric the best
    one resolved to; ``metric`` ``independent`` judges forward and backward TFLOPS by
    the independent-metrics rule (``runner.judge.independent``)."""
    best_csv = read_csv(best_path)
    cand_csv = read_csv(cand_path, pinned=best_csv.header)
    check_same_shapes(best_csv, cand_csv)
    names = component_metrics(INDEPENDENT if metric == Metric.INDEPENDENT.value else metric)
    best = {b.metric: b for b in (score(best_csv, k) for k in names)}
    cand = {k: score(cand_csv, k) for k in best}
    return decide_metrics(best, cand, sigma_g=sigma_g, targeted_shapes=tuple(targeted))


def gate_json(result: GateResult) -> GateJSON:
    """The ``campaign gate --json`` contract (``GateResult.to_dict`` is its one source)."""
    return cast(GateJSON, result.to_dict())
