"""The typed answers of the MCP tools (pydantic models, so clients get a schema) and the
functions that build them from a campaign."""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, Field

from runner.core.csv_schema import CHECK, LABEL, BenchCSV, Row, Schema, get_schema
from runner.core.errors import ConfigError
from runner.core.outcomes import RoundResult
from runner.render.headline import headline_gain
from runner.render.kernel_facts import facts_lines
from runner.render.status import glance
from runner.store.campaign import Campaign


class CsvRow(BaseModel):
    """One data row of a pinned CSV."""

    label: str
    check: str = Field(description="PASS or FAIL (the benchmark's ERROR counts as FAIL).")
    values: dict[str, float | None] = Field(
        description="Every other column: a number, or null when the cell is '-'/empty "
        "(not applicable) or not finite (see nonfinite)."
    )
    nonfinite: dict[str, str] = Field(
        default_factory=dict, description="Columns holding nan, inf or -inf, as written."
    )


class ParsedCsv(BaseModel):
    """A pinned benchmark CSV, read and validated."""

    path: str
    csv_schema: str = Field(description="gemm, memory, or pinned (a campaign's own header).")
    header: str = Field(description="The header line, byte for byte.")
    columns: list[str]
    checked_against: str | None = Field(
        description="The campaign whose pinned schema the header matched; null when the "
        "header was matched against the built-in schemas."
    )
    rows: list[CsvRow]


class RoundInfo(BaseModel):
    """One closed round, in a line."""

    round: int
    status: str = Field(description="BASELINE, ACCEPTED, ROLLED BACK or FAILED.")
    level: str
    hypothesis: str
    metric: str
    aggregate: float = Field(description="Geomean of the primary metric (0 with a FAIL row).")
    delta_pct: float | None = Field(description="Against the best at the time; null: round-1.")
    pair_gains_pct: list[float] = Field(
        default_factory=list,
        description="The gain of each interleaved incumbent/candidate pair, in percent.",
    )
    decision: str | None = Field(description="The gate's decision; null for round-1.")
    finished: str
    commit: str | None


class CampaignStatus(BaseModel):
    """Where a campaign stands."""

    name: str
    root: str
    source: str = Field(description="The target git repository.")
    target: str
    target_op: str
    target_backend: str
    target_gpu: str
    primary_metric: str
    representative_shapes: list[str]
    pinned_header: str | None = Field(description="Frozen at BASELINE; null before it.")
    closed_rounds: list[int]
    next_round: int = Field(description="The number the next baseline/validate must use.")
    baseline_aggregate: float | None
    best_round: int | None = Field(description="The last BASELINE/ACCEPTED round.")
    best_aggregate: float | None
    headline_gain_pct: float | None = Field(
        description="The headline gain over the baseline in percent: the accepted rounds' "
        "paired gate gains compounded (docs/protocol.md §7.4), as `campaign status` and "
        "the report show it; null before any round is accepted."
    )
    max_iterations: int | None
    sigma_g: float | None = Field(None, description="The baseline's noise (a fraction).")
    threshold_pct: float | None = Field(
        None, description="The acceptance threshold in force, max(2%, 3 sigma_G), in percent."
    )
    running: Mapping[str, object] | None = Field(
        None, description="The command holding the campaign lock (pid, command, started)."
    )
    acceptance: Mapping[str, object] | None = Field(
        None, description="The last `campaign accept`: outcome, when, reasons, its gain."
    )
    checkout: Mapping[str, object] | None = Field(
        None, description="The source checkout's HEAD against the lineage head (at_head, note)."
    )


class RoundReport(BaseModel):
    """A closed round: its summary.md and its result.json."""

    campaign: str
    round: int
    status: str = Field(description="BASELINE, ACCEPTED, ROLLED BACK or FAILED.")
    summary_path: str
    summary_md: str = Field(description="The text of rounds/round-N/summary.md.")
    result: dict[str, object] = Field(description="rounds/round-N/result.json (RoundResult).")
    kernel_facts: list[str] = Field(
        default_factory=list,
        description="The ISA facts of both roles, incumbent -> candidate per kernel, and "
        "their warnings (over the LDS limit, new spills, occupancy down): docs/analysis.md.",
    )


class TournamentEntry(BaseModel):
    """One hypothesis of a tournament (the MCP tool ``validate_tournament``, through
    ``runner.flow.validate``) with its change."""

    hypothesis: str = Field(description="The one hypothesis this change tests.")
    patch: str = Field(description="Unified diff of the candidate against the lineage head.")
    bucket: str = Field(default="K1", description="Transfer bucket (docs/protocol.md §8.2).")


def _csv_row(row: Row, columns: list[str]) -> CsvRow:
    values: dict[str, float | None] = {}
    nonfinite: dict[str, str] = {}
    for column in columns:
        value = row.number(column)
        if value is not None and not math.isfinite(value):
            nonfinite[column] = row.values[column]
            value = None
        values[column] = value
    return CsvRow(label=row.label, check=row.check, values=values, nonfinite=nonfinite)


def parsed_csv(csv: BenchCSV, checked_against: str | None) -> ParsedCsv:
    columns = [c for c in csv.schema.columns if c not in (LABEL, CHECK)]
    return ParsedCsv(
        path=str(csv.path),
        csv_schema=csv.schema.name,
        header=csv.header,
        columns=list(csv.schema.columns),
        checked_against=checked_against,
        rows=[_csv_row(r, columns) for r in csv.rows],
    )


def campaign_schema(campaign: Campaign) -> str | Schema:
    """The header a campaign's CSVs must carry: pinned at BASELINE, else its schema."""
    m = campaign.manifest
    return m.pinned_header if m.pinned_header else get_schema(m.csv_schema)


def round_info(r: RoundResult) -> RoundInfo:
    return RoundInfo(
        round=r.round,
        status=r.status.value,
        level=r.level,
        hypothesis=r.hypothesis,
        metric=r.score.metric,
        aggregate=r.score.aggregate,
        delta_pct=r.gate.delta_pct if r.gate else None,
        pair_gains_pct=list(r.gate.pair_gains_pct) if r.gate else [],
        decision=r.gate.decision.value if r.gate else None,
        finished=r.finished,
        commit=r.commit,
    )


def round_infos(campaign: Campaign) -> list[RoundInfo]:
    """The closed rounds, oldest first (MCP ``list_rounds``, ``campaign rounds``)."""
    return [round_info(r) for r in campaign.results()]


def campaign_status_of(campaign: Campaign) -> CampaignStatus:
    m = campaign.manifest
    closed = campaign.closed_rounds()
    best = campaign.last_accepted()
    baseline = campaign.load_result(1) if 1 in closed else None
    headline = headline_gain(campaign.results())
    return CampaignStatus(
        name=campaign.name,
        root=str(campaign.root),
        source=m.source,
        target=m.target,
        target_op=m.target_op,
        target_backend=m.target_backend,
        target_gpu=m.target_gpu,
        primary_metric=m.primary_metric,
        representative_shapes=list(m.representative_shapes),
        pinned_header=m.pinned_header,
        closed_rounds=closed,
        next_round=campaign.next_round(),
        baseline_aggregate=baseline.score.aggregate if baseline else None,
        best_round=best.round if best else None,
        best_aggregate=best.score.aggregate if best else None,
        headline_gain_pct=headline.pct_or_none,
        max_iterations=m.max_iterations,
        **glance(campaign),
    )


def round_report(campaign: Campaign, n: int) -> RoundReport:
    """One closed round (MCP ``round_summary``, ``campaign show``, ``validate --json``)."""
    result = campaign.load_result(n)
    path = campaign.summary_path(n)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the summary ({exc.strerror or exc})") from None
    return RoundReport(
        campaign=campaign.name,
        round=n,
        status=result.status.value,
        summary_path=str(path),
        summary_md=text,
        result=dict(result.to_dict()),
        kernel_facts=facts_lines(result.kernel_facts),
    )
