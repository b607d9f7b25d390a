"""``campaign init``: record the campaign parameters (docs/protocol.md §2) and
create the campaign directory (docs/protocol.md §3); ``campaign relocate``: point a
copied or moved campaign folder at its own source."""

from __future__ import annotations

from pathlib import Path
from typing import Any, get_args

import click
from click.core import ParameterSource

from runner.cli.app import App
from runner.cli.options import (
    backend_option,
    campaign_option,
    executor_init_option,
    granularity_option,
    target_fields,
    target_option,
)
from runner.core.errors import ConfigError
from runner.flow.new_campaign import git_toplevel
from runner.store.manifest import CacheMode, ExecutionMode, PrimaryMetric
from runner.store.tips import read_tips, resolve_tips_root, tips_path


def parse_shapes(text: str) -> str | list[str]:
    if text.strip() == "all":
        return "all"
    shapes = [s.strip() for s in text.split(",") if s.strip()]
    if not shapes:
        raise ConfigError("--shapes is empty; pass 'all' or a comma-separated list of labels")
    return shapes


# A field of a manifest in upstream's shape -> the init option that sets it (None: no
# option; the imported value is taken as it is).
FROM_MANIFEST = {
    "target_op": "op",
    "granularity": "granularity",
    "target_backend": "backend",
    "target_lang": None,
    "target_gpu": "gpu",
    "execution_mode": "mode",
    "project_skill": "project_skill",
    "performance_target": "performance_target",
    "primary_metric": "primary_metric",
    "target_shapes": "shapes",
    "representative_shapes": None,
    "kernel_source": "kernel_source",
    "test_command": "test_command",
    "benchmark_command": "benchmark_command",
    "git_commit": "no_git_commit",
    "git_branch": "git_branch",
    "max_iterations": "max_iterations",
    "created": None,
}


def merge_upstream_manifest(fields: dict[str, Any], path: Path) -> dict[str, Any]:
    """``fields`` (create_campaign's) with those of upstream's manifest at ``path`` that
    the command line left at their defaults (an explicit option wins)."""
    from runner.store.upstream_manifest import read_upstream_manifest, target_of_skill

    ctx = click.get_current_context()

    def defaulted(option: str | None) -> bool:
        return option is None or ctx.get_parameter_source(option) in (
            None,
            ParameterSource.DEFAULT,
        )

    imported = read_upstream_manifest(path)
    for key, value in imported.items():
        if defaulted(FROM_MANIFEST[key]):
            fields[key] = value
    target = target_of_skill(imported.get("project_skill"))
    if target is not None and defaulted("target"):
        fields["target"] = target
    return fields


@click.command("init")
@click.option(
    "--op",
    default=None,
    help="Operator, e.g. gemm_fp8, gemm, grouped_gemm (or gemm_fp8_blockwise).",
)
@click.option(
    "--from-manifest",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="A manifest.yaml in upstream's shape (Primus-Turbo's kernel-optimize skill page): "
    "its fields fill the options not given here.",
)
@click.option(
    "--project-skill",
    default=None,
    help="Upstream's project skill (default for primus-turbo: primus-turbo-develop).",
)
@granularity_option
@backend_option
@click.option("--gpu", default="cpu", show_default=True, help="gfx942, gfx950, sm90, cpu...")
@target_option
@click.option(
    "--source",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The target git repository (a work tree).",
)
@click.option(
    "--mode",
    type=click.Choice(get_args(ExecutionMode)),
    default="repo",
    show_default=True,
    help="repo: rounds change the source tree; workspace: docs/protocol.md §3.2.",
)
@click.option("--name", default=None, help="Campaign name (default <op>_<backend>_<gpu>_<date>).")
@click.option(
    "--performance-target", default=None, help="e.g. '>500 TFLOPS', '>=3000 GB/s', '80% of peak'."
)
@click.option("--max-iterations", type=int, default=None, help="At most 119.")
@click.option("--git-branch", default="auto", show_default=True, help="auto, none or a name.")
@click.option("--no-git-commit", is_flag=True, help="Do not commit accepted rounds.")
@click.option(
    "--shapes",
    default="all",
    show_default=True,
    help="'all' or a comma list of labels, plain MxNxK shapes, or (with an upstream "
    "shape set) MODEL:GEMM:MBS selectors of Primus-Turbo's benchmark rows, globs "
    "allowed, e.g. 'Llama-2-7B:*:1'.",
)
@click.option(
    "--shape-set",
    default=None,
    help="Shape set (default: the op's own, e.g. moe-cpu on cpu, moe on a GPU); "
    "'upstream' is Primus-Turbo bench_gemm_turbo.py's own rows on a GPU outside its "
    "batch-size table (H100, H200), upstream-mi300-fp8 etc. on MI300/MI355.",
)
@click.option(
    "--heldout/--no-heldout",
    default=True,
    show_default=True,
    help="Reserve a few shapes of the op's set as held-out (never measured by rounds, "
    "judged by `campaign accept`).",
)
@click.option("--heldout-seed", type=int, default=None, help="Seed of the held-out pick.")
@click.option(
    "--cache-mode",
    type=click.Choice(get_args(CacheMode)),
    default="hot",
    show_default=True,
    help="hot: inputs stay in the GPU's L2 between timed calls; cold: L2 flushed before each.",
)
@click.option("--primary-metric", type=click.Choice(get_args(PrimaryMetric)), default=None)
@click.option("--test-command", default=None, help="The focused test command.")
@click.option("--benchmark-command", default=None, help="The focused benchmark command.")
@click.option(
    "--suite-command",
    default=None,
    help="The full test suite `campaign accept` runs, in upstream's paths (default: the "
    "target's, e.g. Primus-Turbo's `pytest tests/pytorch/ -v`); recorded in the acceptance.",
)
@click.option("--kernel-source", multiple=True, help="Kernel file under optimisation (repeat).")
@executor_init_option
@click.option(
    "--image",
    default=None,
    help="Container image (docker/slurm); default for primus-turbo: the one `campaign "
    "image` built for --gpu (turbo-campaign/rocm:<gfx>), recorded by image id.",
)
@click.pass_obj
def init_cmd(app: App, **opts: Any) -> None:
    """Create a campaign directory with a validated manifest.yaml.  The kernel source,
    focused test and benchmark commands default to the target adapter's; the base
    commit is the source tree's HEAD."""
    from runner.flow.new_campaign import CampaignFields, create_campaign

    source = git_toplevel(opts["source"].resolve())
    fields = init_fields(opts, source)
    if opts["from_manifest"] is not None:
        fields = merge_upstream_manifest(fields, opts["from_manifest"])
    if not fields.get("target_op"):
        raise ConfigError("give --op (e.g. gemm_fp8), or --from-manifest FILE with target_op")
    campaign = create_campaign(
        app.campaigns_root, CampaignFields.from_mapping(fields, "campaign init")
    )
    click.echo(f"campaign: {campaign.root}")
    tips = read_tips(campaign.manifest, resolve_tips_root(app.campaigns_root, None))
    if tips:  # READ_HISTORICAL_TIPS: read before the first round
        path = tips_path(campaign.manifest, resolve_tips_root(app.campaigns_root, None))
        click.echo(f"historical tips ({path}):\n{tips}")


def init_fields(opts: dict[str, Any], source: Path) -> dict[str, Any]:
    """create_campaign's fields from init's options."""
    return dict(
        **target_fields(opts, str(source)),
        execution_mode=opts["mode"],
        performance_target=opts["performance_target"],
        primary_metric=opts["primary_metric"],
        target_shapes=parse_shapes(opts["shapes"]),
        shape_set=opts["shape_set"],
        kernel_source=list(opts["kernel_source"]),
        test_command=opts["test_command"],
        benchmark_command=opts["benchmark_command"],
        suite_command=opts["suite_command"],
        git_commit=not opts["no_git_commit"],
        git_branch=opts["git_branch"],
        max_iterations=opts["max_iterations"],
        cache_mode=opts["cache_mode"],
        heldout=opts["heldout"],
        heldout_seed=opts["heldout_seed"],
        project_skill=opts["project_skill"],
        say=click.echo,
    )


@click.command("relocate")
@campaign_option
@click.option(
    "--source",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="The checkout this campaign folder runs in from now on (with its lineage).",
)
@click.pass_obj
def relocate_cmd(app: App, name: str | None, source: Path) -> None:
    """Point a copied or moved campaign folder at its own source checkout: rewrites the
    manifest's source and folder, and records the change in logs/optimize.md."""
    from runner.store.campaign import Campaign
    from runner.store.relocation import relocate

    entry = relocate(Campaign.find(app.campaigns_root, name), source)
    click.echo(entry)


COMMANDS: list[click.Command] = [init_cmd, relocate_cmd]
