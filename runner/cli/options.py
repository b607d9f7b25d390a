"""Options several commands share, declared once so their names, defaults and help
cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from runner.executors.factory import EXECUTORS

F = TypeVar("F", bound=Callable[..., Any])

# The executors by name (``runner.executors.factory.EXECUTORS``; a test keeps them equal
# to the names ``Manifest.executor`` accepts).
EXECUTOR_NAMES = tuple(EXECUTORS)
_EXECUTORS_TEXT = ", ".join(EXECUTOR_NAMES[:-1]) + " or " + EXECUTOR_NAMES[-1]

campaign_option: Callable[[F], F] = click.option(
    "--campaign",
    "name",
    metavar="NAME",
    default=None,
    help="Campaign name (default: the only campaign under the campaigns root).",
)

executor_override_option: Callable[[F], F] = click.option(
    "--executor",
    type=click.Choice(EXECUTOR_NAMES),
    default=None,
    help=f"Run the passes on another executor than the manifest's: {_EXECUTORS_TEXT}.",
)

executor_init_option: Callable[[F], F] = click.option(
    "--executor",
    type=click.Choice(EXECUTOR_NAMES),
    default=None,
    help=f"Where the passes run: {_EXECUTORS_TEXT} (docker and slurm take --image); "
    "default: docker for primus-turbo (the image `campaign image` built), local otherwise.",
)

gpus_option: Callable[[F], F] = click.option(
    "--gpus",
    metavar="LIST",
    default="",
    help="Lease and shard over these GPUs, e.g. 0,1 (shapes balanced by their measured seconds).",
)
