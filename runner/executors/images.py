"""Build the ROCm images from ``Dockerfile.rocm`` (``campaign image``).

``rocm_build_args`` is pure, so the exact ``docker build`` argv is tested; the build
itself runs through ``runner.core.processes.run``.  Primus-Turbo comes only from the user's
checkout, passed as the named build context ``turbo`` (never vendored, never cloned).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from runner.core import processes as cmd
from runner.core.errors import ConfigError, InfrastructureError

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = "Dockerfile.rocm"
ROCM_REPO = "turbo-campaign/rocm"
WORKSPACE_TAG = "turbo-campaign/rocm-workspace:latest"
SUPPORTED_ARCHS = ("gfx942", "gfx950")


@dataclass(frozen=True)
class ImageRequest:
    """What ``campaign image`` builds: the Primus-Turbo image, or the workspace one."""

    gpu_archs: str | None = None
    turbo_src: Path | None = None
    tag: str | None = None
    workspace: bool = False
    max_jobs: str | None = None
    turbo_commit: str = "unknown"


def parse_archs(gpu_archs: str | None) -> list[str]:
    """``'gfx942;gfx950'`` (commas too) -> checked list; empty fails with the fix."""
    archs = [a.strip().lower() for a in re.split(r"[;,]", gpu_archs or "") if a.strip()]
    if not archs:
        raise ConfigError(
            "--gpu-archs (env GPU_ARCHS) is required: the image build has no GPU to detect. "
            "Use gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X) or 'gfx942;gfx950'."
        )
    unknown = sorted(set(archs) - set(SUPPORTED_ARCHS))
    if unknown:
        raise ConfigError(
            f"unsupported GPU arch(s) {unknown}; Primus-Turbo builds for {list(SUPPORTED_ARCHS)}"
        )
    return archs


def default_tag(request: ImageRequest) -> str:
    if request.workspace:
        return WORKSPACE_TAG
    return f"{ROCM_REPO}:{'-'.join(parse_archs(request.gpu_archs))}"


def rocm_build_args(request: ImageRequest, repo_root: Path = REPO_ROOT) -> list[str]:
    """The exact ``docker build`` argv for ``request`` (pure)."""
    tag = request.tag or default_tag(request)
    args = ["docker", "build", "--file", str(repo_root / DOCKERFILE)]
    if request.workspace:
        args += ["--target", "workspace"]
    else:
        archs = ";".join(parse_archs(request.gpu_archs))
        if request.turbo_src is None:
            raise ConfigError(
                "--turbo-src (env TURBO_SRC) is required: the Primus-Turbo checkout to build "
                "(with submodules: git submodule update --init --recursive)"
            )
        args += ["--target", "turbo"]
        args += ["--build-context", f"turbo={request.turbo_src}"]
        args += ["--build-arg", f"GPU_ARCHS={archs}"]
        args += ["--build-arg", f"TURBO_COMMIT={request.turbo_commit}"]
        if request.max_jobs:
            args += ["--build-arg", f"MAX_JOBS={request.max_jobs}"]
    return [*args, "--tag", tag, str(repo_root)]


def check_turbo_src(path: Path) -> Path:
    """The resolved checkout, or a ConfigError saying what is missing."""
    src = path.expanduser().resolve()
    if not (src / "setup.py").is_file() or not (src / "primus_turbo").is_dir():
        raise ConfigError(
            f"{src} is not a Primus-Turbo checkout (no setup.py and primus_turbo/); "
            "pass --turbo-src PATH (env TURBO_SRC)"
        )
    if not any((src / "3rdparty").glob("*/*")):
        raise ConfigError(
            f"{src}/3rdparty is empty: the build is offline-safe only with submodules; run "
            f"git -C {src} submodule update --init --recursive"
        )
    return src


def git_commit(src: Path) -> str:
    proc = cmd.run(["git", "-C", str(src), "rev-parse", "HEAD"], check=False)
    out = (proc.stdout or "").strip()
    return out if proc.returncode == 0 and re.fullmatch(r"[0-9a-f]{40}", out) else "unknown"


def check_buildkit() -> None:
    """``--build-context`` needs BuildKit (docker buildx)."""
    proc = cmd.run(["docker", "buildx", "version"], check=False)
    if proc.returncode != 0:
        raise InfrastructureError(
            "docker buildx is missing; Dockerfile.rocm needs BuildKit for --build-context. "
            "Install Docker 23+ with the buildx plugin (docker-buildx-plugin), then retry."
        )


def build(args: list[str]) -> None:
    """Run the build with its output on the terminal."""
    env = dict(os.environ, DOCKER_BUILDKIT="1")
    cmd.run(args, env=env, capture=False)
