"""The ``turbo`` MCP server (``campaign mcp``): the campaign loop as typed tools for a
coding agent, over stdio.  Agents see the tools as ``mcp__turbo__<name>``.

Every tool calls the same functions as the ``campaign`` command line, so it refuses
exactly what the CLI refuses: ``runner.judge.json_contract`` for score/gate (the same JSON as
``--json``), ``runner.flow.validate`` for the rounds, ``runner.core.csv_schema`` for the CSV checks.
A ``CampaignError`` (and a round's ``MeasurementFailed``) becomes an MCP tool error
(``isError`` result carrying the message); the server keeps serving.

Rounds run in a worker thread so that the server stays responsive; their progress
lines become ``notifications/progress`` (when the client asked for progress) and
log lines on stderr.  While serving, stdout carries only the protocol: the SDK points
file descriptor 1 at stderr, so subprocess output cannot corrupt it.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.stdio import stdio_server
from mcp.types import ToolAnnotations
from pydantic import Field

from runner import __version__
from runner.cli.mcp_models import (
    CampaignStatus,
    ParsedCsv,
    RoundInfo,
    RoundReport,
    TournamentEntry,
    campaign_schema,
    campaign_status_of,
    parsed_csv,
    round_infos,
    round_report,
)
from runner.cli.mcp_transport import Frames, Lines, Wire
from runner.cli.options import PAIRS_HELP
from runner.core.csv_io import read_csv
from runner.core.errors import CampaignError, ConfigError
from runner.executors.factory import make_executor
from runner.flow import baseline
from runner.flow.validate import Request, validate, validate_round
from runner.judge.json_contract import (
    GateJSON,
    ScoreJSON,
    gate_csvs,
    gate_json,
    score_csv,
    score_json,
)
from runner.judge.scoring import Metric
from runner.measure.progress import Progress, TurnDone
from runner.store.campaign import Campaign
from runner.store.tips import read_tips, resolve_tips_root

SERVER_NAME = "turbo"
_NAME = re.compile(r"[A-Za-z0-9._-]+")
log = logging.getLogger(__name__)
T = TypeVar("T")

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False)
ROUND = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)

CampaignName = Annotated[
    str | None,
    Field(description="Campaign name under the campaigns root; omit when there is only one."),
]
MetricArg = Annotated[
    Metric,
    Field(
        description="Primary metric: auto picks Combined Step TFLOPS for fwd+bwd GEMMs, "
        "Forward TFLOPS for forward-only ones and Forward GB/s for memory-bound ops."
    ),
]

# the last rollback's diagnosis, given with the next round (Rule 7, docs/protocol.md §7.1)
RootCause = Annotated[
    str, Field(description="Diagnosis of the last rollback (Rule 7): why it did not help.")
]
Lesson = Annotated[str, Field(description="What the last rollback says about the bottleneck.")]
Attribution = Annotated[str, Field(description="Why the last rolled-back round behaved as it did.")]
RoundLevel = Annotated[
    Literal["quick", "full"],
    Field(description="quick: representative shapes; full: every target shape."),
]
Pairs = Annotated[int | None, Field(description=PAIRS_HELP)]
TransferBucket = Annotated[
    str, Field(description="Transfer bucket (docs/protocol.md §8.2): K1-K4 or W1.")
]


# ---------------------------------------------------------------- output models


# ---------------------------------------------------------------- helpers


@contextmanager
def tool_errors() -> Iterator[None]:
    """Turn the runner's anticipated failures into MCP tool errors (isError results)."""
    try:
        yield
    except CampaignError as exc:  # MeasurementFailed and Tampered included
        raise ToolError(str(exc)) from exc


async def run_in_worker(ctx: Context, job: Callable[[Progress], T]) -> T:
    """Run ``job(progress)`` in a worker thread; each progress line becomes a progress
    notification (numbered 1, 2, ...; no total) and a log line on stderr (single
    worker turns neither: a step, the pairs planned and each pair done do)."""
    step = itertools.count(1)

    def progress(message: str) -> None:
        if isinstance(message, TurnDone):
            return
        log.info("%s", message)
        try:
            anyio.from_thread.run(ctx.report_progress, float(next(step)), None, message)
        except Exception as exc:  # a lost notification must never abort a round
            log.warning("progress notification not sent: %s", exc)

    return await anyio.to_thread.run_sync(job, progress)


# ---------------------------------------------------------------- the tools


class TurboTools:
    """The tools, bound to one campaigns root."""

    def __init__(self, campaigns_root: Path) -> None:
        self.campaigns_root = Path(campaigns_root)

    def _campaign(self, name: str | None) -> Campaign:
        """A campaign by name under the campaigns root only (never a path elsewhere)."""
        if name is not None and (not _NAME.fullmatch(name) or name in (".", "..")):
            raise ConfigError(
                f"campaign {name!r}: give the name of a campaign under {self.campaigns_root} "
                "(letters, digits, '.', '_' and '-'), not a path"
            )
        return Campaign.find(self.campaigns_root, name)

    def _path(self, text: str) -> str:
        """A file under the campaigns root (relative paths are taken from it)."""
        root = self.campaigns_root.resolve()
        if "\x00" in text:
            raise ConfigError(f"{text!r} is not a path")
        given = Path(text)
        resolved = (given if given.is_absolute() else root / given).resolve()
        if not resolved.is_relative_to(root):
            raise ConfigError(
                f"{text}: the MCP tools read files under the campaigns root {root} only; "
                "copy the file there or give a path inside it"
            )
        return str(resolved)

    def parse_bench_csv(
        self,
        path: Annotated[str, Field(description="Path of the benchmark CSV.")],
        campaign: CampaignName = None,
    ) -> ParsedCsv:
        """Read a pinned benchmark CSV and return its rows: label, check (PASS/FAIL) and
        every other column as a number or null.  With `campaign`, the header's columns must
        equal that campaign's pinned header (manifest.pinned_header) exactly; without,
        one of the built-in schemas (gemm, memory, attention).  LF and CRLF line endings
        both read (csv.DictWriter writes CRLF).  Errors: unreadable file, header
        drift (the message names each differing column), bad values (e.g. a PASS row
        without a usable number), duplicate labels, unknown campaign."""
        with tool_errors():
            path = self._path(path)
            if campaign is None:
                return parsed_csv(read_csv(path), None)
            found = self._campaign(campaign)
            return parsed_csv(read_csv(path, pinned=campaign_schema(found)), found.name)

    def score(
        self,
        path: Annotated[str, Field(description="Path of the benchmark CSV.")],
        metric: MetricArg = Metric.AUTO,
        pinned_header: Annotated[
            str | None,
            Field(description="The BASELINE CSV or a file holding its header; drift is an error."),
        ] = None,
    ) -> ScoreJSON:
        """Score a pinned CSV: the same JSON object as `campaign score --json`, i.e.
        {metric, aggregate (geomean over PASS shapes, 0 with any FAIL row), shapes:
        [{label, value, check}], pass, fail}.  Errors: unreadable CSV, header drift,
        bad values, a metric that does not fit the CSV."""
        with tool_errors():
            pinned = self._path(pinned_header) if pinned_header is not None else None
            return score_json(score_csv(self._path(path), metric.value, pinned))

    def gate(
        self,
        best: Annotated[str, Field(description="CSV of the current best round.")],
        candidate: Annotated[str, Field(description="CSV of the candidate.")],
        metric: MetricArg = Metric.AUTO,
        sigma_g: Annotated[
            float | None,
            Field(description="Calibrated sigma_G (e.g. 0.004); threshold max(2%, 3*sigma_G)."),
        ] = None,
        target_shapes: Annotated[
            list[str] | None,
            Field(description="Declare a targeted-shape round: judge these labels only."),
        ] = None,
    ) -> GateJSON:
        """Judge a candidate CSV against the best one: the same JSON object as
        `campaign gate --json` (decision ACCEPTED / ACCEPTED_TRADEOFF / ROLLED_BACK /
        NEEDS_REMEASURE, aggregates, delta_pct, per-shape deltas, regressed shapes,
        reasons, threshold_pct, pairs_used).  A rollback is a result, not an error.
        Errors: unreadable CSVs, header drift between them, different shapes, bad sigma."""
        with tool_errors():
            best, candidate = self._path(best), self._path(candidate)
            return gate_json(
                gate_csvs(best, candidate, metric.value, sigma_g, tuple(target_shapes or ()))
            )

    def campaign_status(self, campaign: CampaignName = None) -> CampaignStatus:
        """Where a campaign stands: target, pinned header, closed rounds, the next round
        number, the baseline and current-best aggregates, the headline gain (the accepted
        rounds' paired gate gains compounded, docs/protocol.md §7.4).  Errors: no campaign, several
        campaigns and none named, a broken manifest or result.json."""
        with tool_errors():
            return campaign_status_of(self._campaign(campaign))

    def list_rounds(self, campaign: CampaignName = None) -> list[RoundInfo]:
        """The closed rounds, oldest first: status, level, hypothesis, aggregate, delta
        against the best of the time, gate decision, finish time, lineage commit.
        Errors: as campaign_status."""
        with tool_errors():
            return round_infos(self._campaign(campaign))

    def round_summary(
        self,
        n: Annotated[int, Field(description="The round number (1 is the baseline).")],
        campaign: CampaignName = None,
    ) -> RoundReport:
        """One closed round: the text of its summary.md and its result.json.  Errors:
        the round is not closed (or does not exist), a broken result.json."""
        with tool_errors():
            return round_report(self._campaign(campaign), n)

    async def run_baseline(
        self,
        ctx: Context,
        campaign: CampaignName = None,
        passes: Annotated[int, Field(description="Calibration passes (>= 2).")] = 5,
    ) -> RoundReport:
        """Round-1 of an existing campaign (`campaign baseline`): full validation over
        every target shape in `passes` fresh processes, noise calibration,
        representative shapes, records.  Long-running; sends progress notifications.
        Returns the closed round.  Errors: fewer than 2 passes, a baseline already
        there, the campaign busy, the baseline failing its focused test or benchmark."""
        with tool_errors():
            found = self._campaign(campaign)
            executor = make_executor(found.manifest)
            tips = read_tips(found.manifest, resolve_tips_root(self.campaigns_root, None))
            if tips:  # READ_HISTORICAL_TIPS, as the CLI's baseline prints them
                await ctx.info(f"historical tips ({found.manifest.target_gpu}):\n{tips}")
            result = await run_in_worker(
                ctx, lambda p: baseline.run_baseline(found, executor, passes=passes, progress=p)
            )
            return round_report(found, result.round)

    async def validate_round(
        self,
        ctx: Context,
        n: Annotated[int, Field(description="The next round number (never reused).")],
        hypothesis: Annotated[str, Field(description="The one hypothesis this change tests.")],
        patch: Annotated[
            str | None,
            Field(description="Unified diff of the candidate; null: the source tree's diff."),
        ] = None,
        level: RoundLevel = "quick",
        campaign: CampaignName = None,
        bucket: TransferBucket = "K1",
        restore: Annotated[
            bool,
            Field(
                description="On ROLLED BACK or FAILED put the checkout's edit back to the "
                "lineage head, kept under a ref (docs/protocol.md §6.7); false: leave it."
            ),
        ] = True,
        pairs: Pairs = None,
        allow_outside: Annotated[
            list[str] | None,
            Field(
                description="Paths outside kernel_source the change may touch (recorded in "
                "the round); the focused test still runs as the lineage head has it."
            ),
        ] = None,
        root_cause: RootCause = "",
        lesson: Lesson = "",
        attribution: Attribution = "",
    ) -> RoundReport:
        """VALIDATE round n (`campaign validate`): the candidate against the last accepted
        round, paired, then the gate and the records.  Long-running; sends progress
        notifications.  Returns the closed round; ROLLED BACK and FAILED are results
        (see status and summary_md), not errors.  Errors (nothing written): no
        baseline, n not the next round, an empty hypothesis, an empty or
        non-applying patch, a change outside kernel_source not in allow_outside, the
        campaign busy."""
        with tool_errors():  # a refused request (pairs, bucket, sizes) says why
            request = Request(
                n,
                hypothesis,
                patch,
                level,
                restore,
                bucket,
                pairs,
                allow_outside=tuple(allow_outside or ()),
                diagnosis=(
                    ("attribution", attribution),
                    ("root_cause", root_cause),
                    ("lesson", lesson),
                ),
            )
            found = self._campaign(campaign)
            executor = make_executor(found.manifest)
            result = await run_in_worker(
                ctx, lambda p: validate_round(found, executor, request, progress=p)
            )
            return round_report(found, result.round)

    async def validate_tournament(
        self,
        ctx: Context,
        n: Annotated[int, Field(description="The next round number: the first entry's.")],
        entries: Annotated[
            list[TournamentEntry],
            Field(
                description="Two or more hypotheses, each with its patch; entry k is round n+k-1.",
                min_length=2,
            ),
        ],
        level: RoundLevel = "quick",
        campaign: CampaignName = None,
        pairs: Pairs = None,
        allow_outside: Annotated[
            list[str] | None,
            Field(description="Paths outside kernel_source the changes may touch (recorded)."),
        ] = None,
    ) -> list[RoundReport]:
        """A tournament (`campaign validate` with several --patch, docs/protocol.md §1.5):
        every entry is its own round, all judged against the incumbent in one paired
        measurement; the best accepted one is confirmed by a fresh paired measurement and
        committed, the other accepted ones roll back as superseded.  An entry that does
        not apply, fails its focused test, is vetoed or crashes fails alone.  Returns
        the closed rounds (each report's tournament line says which won and why).
        Errors (nothing written): no baseline, n not the next round, an empty
        hypothesis, no entry that can be measured, the campaign busy."""
        with tool_errors():  # a refused request (pairs, bucket, sizes) says why
            requests = [
                Request(
                    n + k,
                    e.hypothesis,
                    e.patch,
                    level,
                    False,
                    e.bucket,
                    pairs,
                    allow_outside=tuple(allow_outside or ()),
                )
                for k, e in enumerate(entries)
            ]
            found = self._campaign(campaign)
            executor = make_executor(found.manifest)
            results = await run_in_worker(
                ctx,
                lambda p: validate(found, executor, requests, progress=p),
            )
            return [round_report(found, r.round) for r in results]


def build_server(campaigns_root: Path) -> MCPServer:
    """The ``turbo`` server with every tool registered."""
    server: MCPServer = MCPServer(
        SERVER_NAME,
        version=__version__,
        instructions="Primus-Turbo kernel-optimisation campaigns: pinned CSVs, the "
        "statistical gate, baseline and VALIDATE rounds with append-only records.",
    )
    tools = TurboTools(campaigns_root)
    readers: list[Callable[..., object]] = [
        tools.parse_bench_csv,
        tools.score,
        tools.gate,
        tools.campaign_status,
        tools.list_rounds,
        tools.round_summary,
    ]
    for fn in readers:
        server.add_tool(fn, annotations=READ_ONLY)
    for fn in (tools.run_baseline, tools.validate_round, tools.validate_tournament):
        server.add_tool(fn, annotations=ROUND)
    return server


def serve(campaigns_root: Path) -> None:
    """Serve over stdio until the client closes stdin: the SDK's stdio transport on the
    bounded wire of ``runner.cli.mcp_transport`` (a malformed line gets an error reply)."""
    anyio.run(_serve_stdio, build_server(campaigns_root))


async def _serve_stdio(server: MCPServer) -> None:
    wire = Wire()
    try:
        stdin: Any = Lines(wire)  # the SDK reads lines from it and writes frames to stdout
        stdout: Any = Frames(wire)
        async with stdio_server(stdin=stdin, stdout=stdout) as (read, write):
            # what MCPServer.run_stdio_async does, on this wire
            low = server._lowlevel_server
            await low.run(read, write, low.create_initialization_options())
    finally:
        wire.restore()
