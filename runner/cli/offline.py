"""Offline commands: ``campaign score`` and ``campaign gate``.

They read pinned CSVs that already exist (no GPU, no campaign directory) and print a
score or a verdict; ``--json`` prints exactly one JSON object.  Exit codes: 0 accepted
(or a score printed), 3 rolled back, 4 needs re-measuring, 2 unusable input (raised as
ConfigError and mapped in ``runner.cli.main``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click
from tabulate import tabulate

from runner.errors import ConfigError, NeedsRemeasure, RolledBack
from runner.gate import decide
from runner.results import Decision, GateResult, Score
from runner.schema import read_csv
from runner.scoring import Metric, score

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
    "TFLOPS for forward-only ones and Forward GB/s for memory-bound ops.",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")


def read_pinned_header(path: str) -> str:
    """The first line of ``path`` (a header file or a pinned CSV), byte for byte (a BOM
    or a carriage return is kept so that the comparison reports it)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the pinned header ({exc.strerror or exc}); pass the "
            "BASELINE CSV or a file holding its header line"
        ) from None
    try:
        return raw.decode("utf-8").partition("\n")[0]
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 ({exc}); re-save it as UTF-8") from None


def _dump(obj: dict[str, Any]) -> None:
    click.echo(json.dumps(obj, allow_nan=False))


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# ---------------------------------------------------------------- score


def score_json(sc: Score) -> dict[str, Any]:
    """The ``campaign score --json`` contract: label/value/check per shape."""
    return {
        "metric": sc.metric,
        "aggregate": sc.aggregate,
        "shapes": [{"label": s.label, "value": s.value, "check": s.check} for s in sc.shapes],
        "pass": sc.n_pass,
        "fail": sc.n_fail,
    }


def _print_score(sc: Score) -> None:
    rows = [
        [
            s.label,
            s.check,
            _num(s.value),
            _num(s.forward),
            _num(s.backward),
            _num(s.forward_ms),
            _num(s.backward_ms),
        ]
        for s in sc.shapes
    ]
    headers = ["label", "check", sc.metric, "forward", "backward", "fwd ms", "bwd ms"]
    click.echo(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    click.echo(f"\naggregate ({sc.metric}, geomean): {sc.aggregate:.3f}")
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
    pinned = read_pinned_header(pinned_header) if pinned_header else None
    sc = score(read_csv(csv_path, pinned=pinned), metric)
    if as_json:
        _dump(score_json(sc))
    else:
        _print_score(sc)


# ---------------------------------------------------------------- gate


def _print_gate(result: GateResult) -> None:
    rows = [
        [
            s.label,
            _num(s.best),
            _num(s.candidate),
            "-" if s.delta_pct is None else f"{s.delta_pct:+.2f}",
            s.check,
        ]
        for s in result.shapes
    ]
    headers = ["label", f"best {result.metric}", "candidate", "delta %", "check"]
    click.echo(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    threshold = "" if result.threshold_pct is None else f", threshold {result.threshold_pct:.2f}%"
    click.echo(
        f"\naggregate: best {result.best_aggregate:.3f}, candidate "
        f"{result.candidate_aggregate:.3f} ({result.delta_pct:+.2f}%{threshold})"
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
    best_csv = read_csv(best_path)
    cand_csv = read_csv(cand_path, pinned=best_csv.header)
    best_score = score(best_csv, metric)
    cand_score = score(cand_csv, best_score.metric)
    result = decide(best_score, cand_score, sigma_g=sigma_g, targeted_shapes=targeted)
    if as_json:
        _dump(result.to_dict())
    else:
        _print_gate(result)
    ctx.exit(EXIT_CODES[result.decision])


COMMANDS: list[click.Command] = [score_cmd, gate_cmd]
