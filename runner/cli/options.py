"""Options several commands share, declared once so their names, defaults and help
cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, get_args

import click

from runner.executors.factory import EXECUTORS
from runner.store.manifest import Backend, Granularity, TargetName

F = TypeVar("F", bound=Callable[..., object])

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

# The choices `init` and `baseline --op` offer, from the manifest's own types.
granularity_option: Callable[[F], F] = click.option(
    "--granularity",
    type=click.Choice(get_args(Granularity)),
    default=None,
    help="FP8 scaling granularity; the fp8 ops need one, the others take none.",
)

backend_option: Callable[[F], F] = click.option(
    "--backend",
    type=click.Choice(get_args(Backend), case_sensitive=False),
    default=None,
    help="Kernel backend (default: TRITON where the op has it, else the op's only one).",
)

target_option: Callable[[F], F] = click.option(
    "--target",
    type=click.Choice(get_args(TargetName)),
    default="example",
    show_default=True,
    help="The target adapter: the bundled example package or a Primus-Turbo checkout.",
)

# What one paired block is, for `validate --pairs`, `accept --passes` and the MCP tools.
BLOCKS_HELP = (
    "Paired blocks to start with, each two incumbent/candidate samples: B C C B passes "
    "of fresh processes (docker, slurm; B the incumbent, C the candidate), or two "
    "long-lived worker pairs taking A B B A turns (local; A the incumbent, B the "
    "candidate).  The gate asks for more near its threshold."
)
PAIRS_HELP = BLOCKS_HELP + "  Default: the manifest's pairs."

gpus_option: Callable[[F], F] = click.option(
    "--gpus",
    metavar="LIST",
    default="",
    help="Lease and shard over these GPUs, e.g. 0,1 (shapes balanced by their measured seconds).",
)


def json_option(what: str) -> Callable[[F], F]:
    """``--json``: print ``what`` as one JSON value on stdout (progress stays on stderr)."""
    return click.option(
        "--json", "as_json", is_flag=True, help=f"Print {what} as one JSON value on stdout."
    )


def target_fields(opts: dict[str, Any], source: str) -> dict[str, Any]:
    """create_campaign's fields from the options `init` and `baseline --op` share (the
    target, op, granularity, backend, GPU, name, executor and image) and the checkout."""
    return dict(
        campaign_name=opts["name"],
        target=opts["target"],
        source=source,
        target_op=opts["op"],
        granularity=opts["granularity"],
        target_backend=opts["backend"],
        target_gpu=opts["gpu"],
        executor=opts.get("executor"),
        image=opts.get("image"),
    )
