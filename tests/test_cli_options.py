"""Shared CLI options: declared once, the same on every command that takes them."""

from __future__ import annotations

from typing import get_args

import click
from click.testing import CliRunner

from runner.cli import cli
from runner.cli.options import EXECUTOR_NAMES
from runner.store.manifest import Manifest


def _param(command: str, name: str) -> click.Parameter:
    cmd = cli.commands[command]
    return next(p for p in cmd.params if p.name == name)


def test_executor_names_are_the_manifests() -> None:
    assert get_args(Manifest.model_fields["executor"].annotation) == EXECUTOR_NAMES


def test_every_command_offers_every_executor() -> None:
    for command in ("init", "baseline", "validate", "accept", "reproduce"):
        option = _param(command, "executor")
        assert isinstance(option.type, click.Choice), command
        assert tuple(option.type.choices) == EXECUTOR_NAMES, command


def test_campaign_option_is_one_declaration() -> None:
    helps = {
        command: _param(command, "name").help
        for command in ("baseline", "validate", "status", "report", "accept", "tip", "export")
    }
    assert len(set(helps.values())) == 1, helps


def test_help_names_slurm_and_an_unknown_executor_is_refused() -> None:
    runner = CliRunner()
    out = runner.invoke(cli, ["validate", "--help"]).output
    assert "slurm" in " ".join(out.split())
    bad = runner.invoke(cli, ["accept", "--executor", "kubernetes"])
    assert bad.exit_code == 2 and "'kubernetes' is not one of" in bad.output


def test_gpus_option_is_one_declaration_on_every_measuring_command() -> None:
    helps = {
        command: _param(command, "gpus").help
        for command in ("baseline", "validate", "accept", "reproduce")
    }
    assert len(set(helps.values())) == 1, helps


def test_init_and_baseline_offer_the_same_choices() -> None:
    """`baseline --op` creates a campaign as `init` does: the same choice lists (the
    manifest's types), not free text."""
    for name in ("granularity", "backend", "target"):
        init, baseline = _param("init", name), _param("baseline", name)
        assert isinstance(init.type, click.Choice), name
        assert isinstance(baseline.type, click.Choice), name
        assert tuple(init.type.choices) == tuple(baseline.type.choices), name
    assert tuple(baseline.type.choices) == ("example", "primus-turbo")  # the last: target
    bad = CliRunner().invoke(cli, ["baseline", "--op", "gemm_fp8", "--granularity", "blokwise"])
    assert bad.exit_code == 2 and "blokwise" in bad.output


def test_init_help_shows_its_defaults() -> None:
    ctx = click.Context(cli.commands["init"])
    for name, default in (("target", "example"), ("mode", "repo"), ("cache_mode", "hot")):
        record = _param("init", name).get_help_record(ctx)
        assert record is not None and f"[default: {default}]" in record[1], (name, record)


def test_pairs_help_names_both_orders_and_their_letters() -> None:
    for command, name in (("validate", "pairs"), ("accept", "passes")):
        text = _param(command, name).help or ""
        assert "A B B A" in text and "B C C B" in text, (command, text)
        assert "B the incumbent, C the candidate" in text
        assert "A the incumbent, B the" in text
