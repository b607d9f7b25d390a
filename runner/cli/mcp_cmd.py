"""``campaign mcp``: serve the ``turbo`` MCP server over stdio (``runner.cli.mcp_server``)."""

from __future__ import annotations

from pathlib import Path

import click

from runner.cli.app import CAMPAIGNS_ROOT_ENV, App
from runner.core.errors import ConfigError


@click.command("mcp")
@click.option(
    "--campaigns-root",
    metavar="DIR",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help=f"Where campaign directories live (overrides the group option and {CAMPAIGNS_ROOT_ENV}).",
)
@click.pass_obj
def mcp_cmd(app: App, campaigns_root: Path | None) -> None:
    """Serve the `turbo` MCP server over stdio (tools: parse_bench_csv, score, gate,
    campaign_status, list_rounds, round_summary, run_baseline, validate_round,
    validate_tournament).
    Started by an MCP client, not by hand: stdout carries the protocol."""
    try:
        from runner.cli.mcp_server import serve
    except ModuleNotFoundError as exc:
        if not (exc.name or "").startswith("mcp"):
            raise
        raise ConfigError(
            "`campaign mcp` needs the MCP Python SDK: pip install 'turbo-campaign[mcp]'"
        ) from None
    serve(campaigns_root.expanduser().resolve() if campaigns_root else app.campaigns_root)


COMMANDS: list[click.Command] = [mcp_cmd]
