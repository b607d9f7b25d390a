"""``campaign image``: build the ROCm image (Primus-Turbo editable-installed) or the
workspace-mode image from ``Dockerfile.rocm``."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from runner.executors import images


@click.command("image")
@click.option(
    "--gpu-archs",
    envvar="GPU_ARCHS",
    metavar="ARCHS",
    default=None,
    help="Target architectures, e.g. gfx942, gfx950 or 'gfx942;gfx950' (env GPU_ARCHS); "
    "required: the build has no GPU to detect.",
)
@click.option(
    "--turbo-src",
    envvar="TURBO_SRC",
    metavar="PATH",
    type=click.Path(path_type=Path),
    default=None,
    help="Your Primus-Turbo checkout, submodules initialised (env TURBO_SRC).",
)
@click.option("--tag", metavar="TAG", default=None, help="Image tag (default from the archs).")
@click.option(
    "--workspace",
    is_flag=True,
    help="Build the workspace-mode image (stage 'workspace': no Primus-Turbo build).",
)
@click.option(
    "--print",
    "print_only",
    is_flag=True,
    help="Print the exact docker build command and build nothing.",
)
def image(
    gpu_archs: str | None,
    turbo_src: Path | None,
    tag: str | None,
    workspace: bool,
    print_only: bool,
) -> None:
    """Build a ROCm image from Dockerfile.rocm (MAX_JOBS in the environment sets the
    compile parallelism; BuildKit/buildx is required)."""
    request = _request(gpu_archs, turbo_src, tag, workspace, check_src=not print_only)
    args = images.rocm_build_args(request)
    if print_only:
        click.echo(shlex.join(args))
        return
    images.check_buildkit()
    images.build(args)
    click.echo(f"built {args[args.index('--tag') + 1]}")


def _request(
    gpu_archs: str | None,
    turbo_src: Path | None,
    tag: str | None,
    workspace: bool,
    *,
    check_src: bool,
) -> images.ImageRequest:
    if workspace:
        return images.ImageRequest(tag=tag, workspace=True)
    src = turbo_src.expanduser().resolve() if turbo_src is not None else None
    if src is not None and check_src:
        src = images.check_turbo_src(src)
    return images.ImageRequest(
        gpu_archs=gpu_archs,
        turbo_src=src,
        tag=tag,
        max_jobs=os.environ.get("MAX_JOBS") or None,
        turbo_commit=images.git_commit(src) if src is not None and check_src else "unknown",
    )


COMMANDS: list[click.Command] = [image]
