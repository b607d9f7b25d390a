"""Offline commands: ``campaign score`` and ``campaign gate``.

They read pinned CSVs that already exist (no GPU, no campaign directory) and print a
score or a verdict; ``--json`` prints exactly one JSON object.  Exit codes: 0 accepted
(or a score printed), 3 rolled back, 4 needs re-measuring, 2 unusable input (raised as
ConfigError and mapped in ``runner.cli.main``).  The JSON objects come from
``runner.judge.json_contract``, which the MCP tools (``runner.cli.mcp_server``) share.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import click
from tabulate import tabulate

from runner.core.errors import NeedsRemeasure, RolledBack
from runner.core.outcomes import Decision, GateResult, Score
from runner.judge.json_contract import gate_csvs, gate_json, score_csv, score_json
from runner.judge.scoring import Metric
from runner.render.figures import fmt_num, scale_for, score_scale

EXIT_CODES = {
    Decision.ACCEPTED: 0,
    Decision.ACCEPTED_TRADEOFF: 0,
    Decision.ROLLED_BACK: RolledBack.return_code,
    Decision.NEEDS_REMEASURE: NeedsRemeasure.return_code,
}

_metric_option = click.option(
    "--metric",
    type=click.Choice([m.value for m in Metric]),
    default=Metric.AUTO.value,
    show_default=True,
    help="Primary metric: auto picks Combined Step TFLOPS for fwd+bwd GEMMs, Forward "
    "TFLOPS for forward-only ones and Forward GB/s for memory-bound ops; independent "
    "judges Forward and Backward TFLOPS together: no aggregate may fall, one must improve "
    "(docs/protocol.md §5.9).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def _dump(obj: Mapping[str, object]) -> None:
    click.echo(json.dumps(obj, allow_nan=False))


# ---------------------------------------------------------------- score


def _print_score(sc: Score) -> None:
    scale = score_scale(sc.metric, sc)
    rows = [
        [
            s.label,
            s.check,
            scale.num(s.value),
            scale.num(s.forward),
            scale.num(s.backward),
            fmt_num(s.forward_ms),
            fmt_num(s.backward_ms),
        ]
        for s in sc.shapes
    ]
    headers = ["label", "check", scale.label(sc.metric), "forward", "backward", "fwd ms", "bwd ms"]
    click.echo(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    click.echo(f"\naggregate ({scale.label(sc.metric)}, geomean): {scale.value(sc.aggregate)}")
    click.echo(f"pass: {sc.n_pass}  fail: {sc.n_fail}")


@click.command("score")
@click.argument("csv_path", metavar="CSV")
@_metric_option
@click.option(
    "--pinned-header",
    metavar="FILE_OR_CSV",
    default=None,
    help="The BASELINE header (a header file or the BASELINE CSV); drift is an error.",
)
@_json_option
def score_cmd(csv_path: str, metric: str, pinned_header: str | None, as_json: bool) -> None:
    """Score a pinned benchmark CSV: per-shape primary metric and their geomean."""
    sc = score_csv(csv_path, metric, pinned_header)
    if as_json:
        _dump(score_json(sc))
    else:
        _print_score(sc)


# ---------------------------------------------------------------- gate


def _print_gate(result: GateResult) -> None:
    scale = scale_for(result.metric, [v for s in result.shapes for v in (s.best, s.candidate)])
    rows = [
        [
            s.label,
            scale.num(s.best),
            scale.num(s.candidate),
            "-" if s.delta_pct is None else f"{s.delta_pct:+.2f}",
            s.check,
        ]
        for s in result.shapes
    ]
    headers = ["label", f"best {scale.label(result.metric)}", "candidate", "delta %", "check"]
    click.echo(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    threshold = "" if result.threshold_pct is None else f", threshold {result.threshold_pct:.2f}%"
    click.echo(
        f"\naggregate: best {scale.value(result.best_aggregate)}, candidate "
        f"{scale.value(result.candidate_aggregate)} ({result.delta_pct:+.2f}%{threshold})"
    )
    click.echo(f"decision: {result.decision.value}")
    for reason in result.reasons:
        click.echo(f"  - {reason}")


@click.command("gate")
@click.option("--best", "best_path", required=True, metavar="CSV", help="The current best.")
@click.option("--candidate", "cand_path", required=True, metavar="CSV", help="The candidate.")
@_metric_option
@click.option(
    "--sigma-g",
    type=float,
    default=None,
    metavar="FRACTION",
    help="Calibrated sigma_G (e.g. 0.004); the accept threshold is max(2%, 3*sigma_G).",
)
@click.option(
    "--target-shape",
    "targeted",
    multiple=True,
    metavar="LABEL",
    help="Declare a targeted-shape round: judge these shapes only (repeatable).",
)
@_json_option
@click.pass_context
def gate_cmd(
    ctx: click.Context,
    best_path: str,
    cand_path: str,
    metric: str,
    sigma_g: float | None,
    targeted: tuple[str, ...],
    as_json: bool,
) -> None:
    """Judge a candidate CSV against the best one; exit 0 accepted, 3 rolled back,
    4 needs re-measuring, 2 unusable input."""
    result = gate_csvs(best_path, cand_path, metric, sigma_g, targeted)
    if as_json:
        _dump(gate_json(result))
    else:
        _print_gate(result)
    ctx.exit(EXIT_CODES[result.decision])


COMMANDS: list[click.Command] = [score_cmd, gate_cmd]
