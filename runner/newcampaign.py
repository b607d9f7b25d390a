"""Creating a campaign: the manifest filled from the target adapter's facts (kernel
source, focused test and benchmark commands) and the source tree's HEAD as the base
commit.  ``campaign init`` and ``campaign baseline --op ...`` both come here."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from runner.campaign import Campaign
from runner.cli.init_cmd import build_manifest, git_toplevel
from runner.cmd import run
from runner.errors import ConfigError
from runner.lineage import Lineage
from runner.ops.info import op_info
from runner.targets.registry import get_target

EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples"


def create_campaign(campaigns_root: Path, **fields: Any) -> Campaign:
    """Fill target facts into ``fields`` (anything given wins), validate, create."""
    target = get_target(fields.get("target") or "example")
    op = fields["target_op"]
    info = op_info(op)
    info.check_granularity(fields.get("granularity"))
    backend = str(fields.get("target_backend") or "TRITON").upper()
    source = git_toplevel(Path(fields["source"]).resolve())
    fields.update(source=str(source), target=target.name, target_backend=backend)
    if not fields.get("kernel_source"):
        fields["kernel_source"] = target.kernel_source(op, backend)
    gran = fields.get("granularity")
    fields.setdefault("test_command", None)
    fields["test_command"] = fields["test_command"] or target.test_command(op, gran, backend)
    fields.setdefault("benchmark_command", None)
    fields["benchmark_command"] = fields["benchmark_command"] or target.benchmark_command(
        op, gran, backend
    )
    fields["base_commit"] = fields.get("base_commit") or head_commit(source)
    manifest = build_manifest(**fields)
    campaign = Campaign.init(campaigns_root, manifest)
    Lineage(source, manifest.campaign_name, None).resolve(manifest.base_commit or "HEAD")
    return campaign


def head_commit(source: Path) -> str:
    proc = run(["git", "rev-parse", "--verify", "HEAD^{commit}"], cwd=source, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"{source} has no commit yet: commit the target code first")
    return proc.stdout.strip()


def fresh_example_copy(dest: Path) -> Path:
    """A fresh git repository holding a copy of the bundled example package."""
    if dest.exists():
        raise ConfigError(f"{dest} already exists; choose another folder")
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "build")
    shutil.copytree(EXAMPLES_DIR, dest, ignore=ignore)
    env_args = ["-c", "user.name=turbo-campaign", "-c", "user.email=turbo-campaign@localhost"]
    run(["git", "init", "-q", "-b", "main"], cwd=dest)
    run(["git", "add", "-A"], cwd=dest)
    run(["git", *env_args, "commit", "-q", "-m", "example kernels: base"], cwd=dest)
    return dest
