"""``campaign init``: record the campaign parameters (PROTOCOL.md section 2) and
create the campaign directory (section 3)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any, get_args

import click

from runner.cli.app import App
from runner.cmd import run
from runner.errors import ConfigError
from runner.manifest import (
    MANIFEST_SCHEMA_VERSION,
    Backend,
    Granularity,
    Manifest,
    PrimaryMetric,
    campaign_name,
    lang_for_backend,
    validate_manifest,
)

MEMORY_BOUND_OPS = ("quantize",)


def default_metric(op: str) -> str:
    """Memory-bound ops score on Forward GB/s; the GEMM-class training ops on the
    combined forward+backward step."""
    return "Forward GB/s" if op.startswith(MEMORY_BOUND_OPS) else "Combined Step TFLOPS"


def now_minute() -> str:
    return dt.datetime.now().strftime("%Y-%m-%d %H:%M")


def build_manifest(**fields: Any) -> Manifest:
    """A validated manifest from manifest fields; derives what follows from others:
    target_lang (backend), primary_metric (op), csv_schema (metric), shape_set (gpu),
    created (now) and campaign_name (op, granularity, backend, gpu, today)."""
    data = {k: v for k, v in fields.items() if v is not None}
    op = str(data.get("target_op", ""))
    backend = str(data.get("target_backend", "TRITON")).upper()
    gpu = str(data.get("target_gpu", "cpu"))
    data.update(target_backend=backend, target_gpu=gpu)
    data.setdefault("schema_version", MANIFEST_SCHEMA_VERSION)
    data.setdefault("target_lang", lang_for_backend(backend))
    data.setdefault("primary_metric", default_metric(op))
    data.setdefault("csv_schema", "memory" if data["primary_metric"] == "Forward GB/s" else "gemm")
    data.setdefault("shape_set", "cpu" if gpu == "cpu" else "models")
    data.setdefault("created", now_minute())
    if "campaign_name" not in data and op:
        day = dt.datetime.strptime(str(data["created"])[:10], "%Y-%m-%d").date()
        data["campaign_name"] = campaign_name(op, backend, gpu, day, data.get("granularity"))
    return validate_manifest(data, "campaign init")


def git_toplevel(source: Path) -> Path:
    """The top of the git work tree holding ``source``; ConfigError when none."""
    proc = run(["git", "-C", str(source), "rev-parse", "--show-toplevel"], check=False)
    if proc.returncode != 0:
        raise ConfigError(
            f"--source {source} is not a git work tree; point it at a clone of the target "
            "repository (git clone ...) or run `git init` there"
        )
    return Path(proc.stdout.strip()).resolve()


def parse_shapes(text: str) -> str | list[str]:
    if text.strip() == "all":
        return "all"
    shapes = [s.strip() for s in text.split(",") if s.strip()]
    if not shapes:
        raise ConfigError("--shapes is empty; pass 'all' or a comma-separated list of labels")
    return shapes


@click.command("init")
@click.option("--op", required=True, help="Operator, e.g. gemm_fp8, gemm, grouped_gemm.")
@click.option("--granularity", type=click.Choice(get_args(Granularity)), default=None)
@click.option(
    "--backend", type=click.Choice(get_args(Backend), case_sensitive=False), default="TRITON"
)
@click.option("--gpu", default="cpu", show_default=True, help="gfx942, gfx950, sm90, cpu...")
@click.option("--target", type=click.Choice(["example", "primus-turbo"]), default="example")
@click.option(
    "--source",
    required=True,
    type=click.Path(exists=True, file_okay=False, path_type=Path),
    help="The target git repository (a work tree).",
)
@click.option("--mode", type=click.Choice(["repo", "workspace"]), default="repo")
@click.option("--name", default=None, help="Campaign name (default <op>_<backend>_<gpu>_<date>).")
@click.option("--performance-target", default=None, help="e.g. '>500 TFLOPS'.")
@click.option("--max-iterations", type=int, default=None, help="At most 119.")
@click.option("--git-branch", default="auto", show_default=True, help="auto, none or a name.")
@click.option("--no-git-commit", is_flag=True, help="Do not commit accepted rounds.")
@click.option("--shapes", default="all", show_default=True, help="'all' or a comma list.")
@click.option("--shape-set", default=None, help="Default shape set (cpu on cpu, else models).")
@click.option("--cache-mode", type=click.Choice(["hot", "cold"]), default="hot")
@click.option("--primary-metric", type=click.Choice(get_args(PrimaryMetric)), default=None)
@click.option("--test-command", default=None, help="The focused test command.")
@click.option("--benchmark-command", default=None, help="The focused benchmark command.")
@click.option("--kernel-source", multiple=True, help="Kernel file under optimisation (repeat).")
@click.option("--executor", type=click.Choice(["local", "docker", "slurm"]), default="local")
@click.option("--image", default=None, help="Container image (docker/slurm executors).")
@click.pass_obj
def init_cmd(app: App, **opts: Any) -> None:
    """Create a campaign directory with a validated manifest.yaml.  The kernel source,
    focused test and benchmark commands default to the target adapter's; the base
    commit is the source tree's HEAD."""
    from runner.newcampaign import create_campaign

    source = git_toplevel(opts["source"].resolve())
    campaign = create_campaign(
        app.campaigns_root,
        campaign_name=opts["name"],
        target=opts["target"],
        source=str(source),
        target_op=opts["op"],
        granularity=opts["granularity"],
        target_backend=opts["backend"],
        target_gpu=opts["gpu"],
        execution_mode=opts["mode"],
        performance_target=opts["performance_target"],
        primary_metric=opts["primary_metric"],
        target_shapes=parse_shapes(opts["shapes"]),
        shape_set=opts["shape_set"],
        kernel_source=list(opts["kernel_source"]),
        test_command=opts["test_command"],
        benchmark_command=opts["benchmark_command"],
        git_commit=not opts["no_git_commit"],
        git_branch=opts["git_branch"],
        max_iterations=opts["max_iterations"],
        cache_mode=opts["cache_mode"],
        executor=opts["executor"],
        image=opts["image"],
    )
    click.echo(f"campaign: {campaign.root}")


COMMANDS: list[click.Command] = [init_cmd]
