"""The ``turbo`` MCP server (``campaign mcp``) as a real subprocess, driven by the SDK's
stdio client: the tool list, every tool, errors as MCP errors (the server keeps
answering), and a baseline plus a VALIDATE round on the CPU example campaign."""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TextIO

import anyio
import pytest
from campaign_helpers import tiny_campaign
from click.testing import CliRunner
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.types import CallToolResult

from runner.cli import cli
from runner.compare.loop import ROUND_CAP_ENV
from runner.core.csv_io import write_csv
from runner.core.csv_schema import GEMM_SCHEMA, MEMORY_SCHEMA
from runner.core.errors import ConfigError
from runner.flow.demo import PATCHES, SPEEDUP

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
TOOLS = {
    "parse_bench_csv",
    "score",
    "gate",
    "campaign_status",
    "list_rounds",
    "round_summary",
    "run_baseline",
    "validate_round",
    "validate_tournament",
}
TIMEOUT_S = 1800  # a baseline and a round take minutes on a 2-core machine
Session = Callable[[ClientSession], Awaitable[None]]


def with_server(campaigns_root: Path, errlog: TextIO, body: Session) -> None:
    """Start ``python -m runner mcp`` and run ``body`` against it; a failure in ``body``
    is re-raised as itself, outside the SDK's task groups (no exception group).  The
    server gets this process's environment (the SDK's default passes only HOME, PATH
    and a few more): the suite's worker limits and round cap (conftest) apply to it."""
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "runner", "mcp", "--campaigns-root", str(campaigns_root)],
        env=dict(os.environ),
        cwd=str(ROOT),
    )
    failures: list[Exception] = []

    async def main() -> None:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            try:
                with anyio.fail_after(TIMEOUT_S):
                    await body(session)
            except Exception as exc:
                failures.append(exc)

    anyio.run(main)
    if failures:
        raise failures[0]


def run_with_server(tmp_path: Path, campaigns_root: Path, body: Session) -> None:
    log_path = tmp_path / "server.log"
    with log_path.open("w", encoding="utf-8") as errlog:
        try:
            with_server(campaigns_root, errlog, body)
        except BaseException:
            errlog.flush()
            print(log_path.read_text(encoding="utf-8")[-4000:], file=sys.stderr)
            raise


async def ok(session: ClientSession, tool: str, **args: Any) -> dict[str, Any]:
    result = await session.call_tool(tool, args)
    assert isinstance(result, CallToolResult)
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


async def error(session: ClientSession, tool: str, **args: Any) -> str:
    result = await session.call_tool(tool, args)
    assert isinstance(result, CallToolResult)
    assert result.is_error, result.structured_content
    text = result.content[0]
    assert text.type == "text"
    return text.text


# ---------------------------------------------------------------- CSVs


def gemm(label: str, fwd: float, bwd: float, check: str = "PASS") -> dict[str, object]:
    dim = 4096
    flops = 2 * dim**3
    return {
        "label": label,
        "B": 1,
        "M": dim,
        "N": dim,
        "K": dim,
        "Check": check,
        "Forward TFLOPS": fwd if check == "PASS" else math.nan,
        "Forward TFLOPS_stddev": 0.5,
        "Backward TFLOPS": bwd,
        "Backward TFLOPS_stddev": 0.5,
        "Forward Time (ms)": flops / (fwd * 1e9),
        "Backward Time (ms)": 2 * flops / (bwd * 1e9),
        "out_snr": 40.0,
        "da_snr": 40.0,
        "db_snr": math.inf,
    }


def csv_files(tmp_path: Path) -> tuple[str, str, str]:
    best, cand, other = tmp_path / "best.csv", tmp_path / "cand.csv", tmp_path / "mem.csv"
    write_csv(best, GEMM_SCHEMA, [gemm("a", 400, 200), gemm("b", 300, 150)])
    write_csv(cand, GEMM_SCHEMA, [gemm("a", 440, 220), gemm("b", 300, 150, check="FAIL")])
    mem_row = {c: 1.0 for c in MEMORY_SCHEMA.columns} | {"label": "a", "Check": "PASS"}
    write_csv(other, MEMORY_SCHEMA, [mem_row])
    return str(best), str(cand), str(other)


def cli_json(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, [*args, "--json"])
    return json.loads(result.stdout)


# ---------------------------------------------------------------- tests


def test_lists_every_tool_with_documented_schemas(tmp_path: Path) -> None:
    async def body(session: ClientSession) -> None:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == TOOLS
        for tool in tools.values():
            assert tool.description and "Errors" in tool.description, tool.name
            assert tool.input_schema["type"] == "object"
            assert tool.output_schema is not None, tool.name
        validate = tools["validate_round"].input_schema
        assert validate["required"] == ["n", "hypothesis"]
        assert validate["properties"]["level"]["enum"] == ["quick", "full"]
        outside = validate["properties"]["allow_outside"]  # as the CLI's --allow-outside
        assert {"type": "array", "items": {"type": "string"}} in outside["anyOf"]
        assert "ctx" not in tools["run_baseline"].input_schema["properties"]
        assert tools["parse_bench_csv"].input_schema["required"] == ["path"]

    run_with_server(tmp_path, tmp_path / "campaigns", body)


def test_offline_tools_share_the_cli_contract_and_errors_keep_the_server_up(
    tmp_path: Path,
) -> None:
    (tmp_path / "campaigns").mkdir()
    best, cand, mem = csv_files(tmp_path / "campaigns")
    outside = tmp_path / "outside.csv"
    outside.write_bytes(Path(best).read_bytes())

    async def body(session: ClientSession) -> None:
        assert await ok(session, "score", path=best) == cli_json("score", best)
        assert (await ok(session, "score", path="best.csv"))["metric"]  # relative: the root
        for where in (str(outside), "../outside.csv"):
            refused = await error(session, "score", path=where)
            assert "under the campaigns root" in refused
        assert "under the campaigns root" in await error(
            session, "gate", best=best, candidate=str(outside)
        )
        for name in ("../x", str(tmp_path), "a/b", ".."):
            assert "not a path" in await error(session, "campaign_status", campaign=name)
        gate = await ok(session, "gate", best=best, candidate=cand)
        assert gate == cli_json("gate", "--best", best, "--candidate", cand)
        assert gate["decision"] == "ROLLED_BACK"
        parsed = await ok(session, "parse_bench_csv", path=cand)
        assert parsed["csv_schema"] == "gemm" and parsed["checked_against"] is None
        assert [r["label"] for r in parsed["rows"]] == ["a", "b"]
        row_b = parsed["rows"][1]
        assert row_b["check"] == "FAIL" and row_b["values"]["Forward TFLOPS"] is None
        assert row_b["nonfinite"] == {"Forward TFLOPS": "nan", "db_snr": "inf"}
        assert row_b["values"]["M"] == 4096
        missing_csv = str(tmp_path / "campaigns" / "no")
        assert "cannot read the benchmark CSV" in await error(session, "score", path=missing_csv)
        drift = await error(session, "gate", best=best, candidate=mem)
        assert "differs from the pinned schema" in drift and "Forward GB/s" in drift
        assert "no campaign under" in await error(session, "campaign_status")
        missing = await error(session, "parse_bench_csv", path=best, campaign="x")
        assert "no campaign at" in missing
        assert (await ok(session, "score", path=best, metric="forward"))["metric"] == (
            "Forward TFLOPS"
        )

    run_with_server(tmp_path, tmp_path / "campaigns", body)


def test_a_refused_round_request_says_why(tmp_path: Path) -> None:
    """Pairs, bucket and hypothesis are refused with the reason, not a bare "Error
    executing tool" (the request is built inside the tool's error handling)."""

    async def body(session: ClientSession) -> None:
        for tool, extra in (
            ("validate_round", {"hypothesis": "h"}),
            ("validate_tournament", {"entries": [{"hypothesis": "h", "patch": ""}] * 2}),
        ):
            said = await error(session, tool, n=2, pairs=-5, **extra)
            assert "whole number of paired blocks" in said, said
        said = await error(session, "validate_round", n=2, hypothesis="h", bucket="Z9")
        assert "is not a transfer bucket" in said, said
        said = await error(session, "validate_round", n=2, hypothesis="x" * 5000)
        assert "over the limit" in said, said

    run_with_server(tmp_path, tmp_path / "campaigns", body)


def test_without_the_sdk_the_command_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "runner.cli.mcp_server", raising=False)
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)
    result = CliRunner().invoke(cli, ["mcp"])
    assert isinstance(result.exception, ConfigError)
    assert "pip install 'turbo-campaign[mcp]'" in str(result.exception)


# ---------------------------------------------------------------- rounds


@pytest.fixture(scope="module")
def fresh_campaign(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The helpers' tiny CPU example campaign with no round yet: (campaigns root, name)."""
    root = tmp_path_factory.mktemp("mcp-campaigns")
    campaign = tiny_campaign(root, "mcp", baseline=False)
    return root / "campaigns", campaign.name


class Progress:
    """Collects progress notifications; ``started`` is set at the first one."""

    def __init__(self) -> None:
        self.messages: list[str] = []
        self.started = anyio.Event()

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        assert progress == len(self.messages) + 1
        self.messages.append(message or "")
        self.started.set()


async def refusals_before_the_baseline(session: ClientSession, name: str) -> None:
    status = await ok(session, "campaign_status", campaign=name)
    assert (status["name"], status["next_round"], status["closed_rounds"]) == (name, 1, [])
    assert "no baseline yet" in await error(session, "validate_round", n=2, hypothesis="h")
    two = [{"hypothesis": "h1", "patch": ""}, {"hypothesis": "h2", "patch": ""}]
    assert "no baseline yet" in await error(session, "validate_tournament", n=2, entries=two)
    assert "at least 2 passes" in await error(session, "run_baseline", passes=1)
    assert (await ok(session, "list_rounds"))["result"] == []


async def baseline(session: ClientSession, name: str) -> None:
    progress = Progress()
    report = await session.call_tool("run_baseline", {"passes": 2}, progress_callback=progress)
    assert not report.is_error, report.content
    assert report.structured_content is not None
    data = report.structured_content
    assert (data["campaign"], data["round"], data["status"]) == (name, 1, "BASELINE")
    assert "BASELINE" in data["summary_md"] and data["result"]["status"] == "BASELINE"
    assert progress.messages, "no progress notification arrived"
    assert "already has a baseline" in await error(session, "run_baseline", passes=2)


async def validate(session: ClientSession, name: str) -> None:
    wrong = await error(session, "validate_round", n=3, hypothesis="h")
    assert "round 3 is not the next round" in wrong
    assert "patch is empty" in await error(session, "validate_round", n=2, hypothesis="h")
    assert "state the hypothesis" in await error(session, "validate_round", n=2, hypothesis=" ")
    empty = [{"hypothesis": "h1", "patch": ""}, {"hypothesis": "h2", "patch": " "}]
    refused = await error(session, "validate_tournament", n=2, entries=empty)
    assert "no entry of the tournament can be measured" in refused and "patch is empty" in refused
    patch = (PATCHES / SPEEDUP[0]).read_text(encoding="utf-8")
    progress = Progress()
    args = {"n": 2, "hypothesis": SPEEDUP[1], "patch": patch, "campaign": name}
    reports: list[CallToolResult] = []

    async def run_round() -> None:
        result = await session.call_tool("validate_round", args, progress_callback=progress)
        assert isinstance(result, CallToolResult)
        reports.append(result)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run_round)
        await progress.started.wait()  # the round holds the campaign lock from here on
        assert (await ok(session, "campaign_status"))["next_round"] == 2  # still answering
        assert "is busy" in await error(session, "validate_round", **args)
    report = reports[0]
    assert not report.is_error, report.content
    assert report.structured_content is not None
    data = report.structured_content
    assert data["round"] == 2 and data["status"] in ("ACCEPTED", "ROLLED BACK")
    assert data["result"]["gate"]["decision"] in ("ACCEPTED", "ACCEPTED_TRADEOFF", "ROLLED_BACK")
    assert data["summary_md"].startswith(f"# Round 2 — {data['status']}")
    assert SPEEDUP[1] in data["summary_md"]
    assert any("round-2" in m for m in progress.messages)


async def read_back(session: ClientSession, name: str, root: Path) -> None:
    rounds = (await ok(session, "list_rounds"))["result"]
    assert [r["round"] for r in rounds] == [1, 2]
    assert rounds[0]["status"] == "BASELINE" and rounds[0]["decision"] is None
    summary = await ok(session, "round_summary", n=1)
    assert summary["summary_path"].endswith("rounds/round-1/summary.md")
    assert "round 9 of" in await error(session, "round_summary", n=9)
    status = await ok(session, "campaign_status")
    assert status["closed_rounds"] == [1, 2] and status["next_round"] == 3
    assert status["pinned_header"] and status["baseline_aggregate"] > 0
    csv = root / name / "rounds" / "round-1" / "artifacts" / "benchmark.csv"
    parsed = await ok(session, "parse_bench_csv", path=str(csv), campaign=name)
    assert parsed["checked_against"] == name and parsed["rows"]
    drifted = root / "drifted.csv"
    text = csv.read_text(encoding="utf-8")
    drifted.write_text(text.replace("Forward TFLOPS,", "Fwd TFLOPS,", 1), encoding="utf-8")
    drift = await error(session, "parse_bench_csv", path=str(drifted), campaign=name)
    assert "renamed: pinned 'Forward TFLOPS', found 'Fwd TFLOPS'" in drift


def test_a_baseline_and_a_validate_round_through_mcp(
    tmp_path: Path, fresh_campaign: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    root, name = fresh_campaign
    # the round's verdict is not asserted: its first pairs are final (no re-measuring
    # of the demo's small speed-up up to the cap)
    monkeypatch.setenv(ROUND_CAP_ENV, "1")

    async def body(session: ClientSession) -> None:
        await refusals_before_the_baseline(session, name)
        await baseline(session, name)
        await validate(session, name)
        await read_back(session, name, root)

    run_with_server(tmp_path, root, body)
