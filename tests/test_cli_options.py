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
    helps = {command: _param(command, "gpus").help
             for command in ("baseline", "validate", "accept", "reproduce")}  # fmt: skip
    assert len(set(helps.values())) == 1, helps
