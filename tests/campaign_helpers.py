"""The tests' one helpers module: small CPU campaigns of the example package for the
end-to-end tests (one place for the timing they use and the effects they plant), the
in-process CLI runner and a manifest factory.  A test file keeps no copy of these.

``QUIET``: the lightest timing a CPU round runs with (plumbing tests: the verdict is
not what they assert, or the effect they plant is far larger than its noise).

``tiny_campaign(root, name, ...)``: a gemm_fp8 blockwise TORCH campaign on the ``tiny``
shape set under ``root`` (source in ``root/src``, campaigns root ``root/campaigns``),
with its baseline (two passes).  With ``slow_base=True`` the source's base commit
quantises every FP8 weight three times instead of once (``plant_slow_base``), and
``speedup_patch`` removes that waste: an honest speed-up of about 1.5x a step
(16x688x512: 26.3-30.4 -> 17.3-18.4 ms; 64x1376x512: 69.0-74.4 -> 39.1-46.3 ms,
single-threaded CPU time, medians of 7 steps, 2 runs of 2 on the 2-core CI machine at
7782301, 2026-12-06), which a 2-core machine running other tests beside it still reads
far above any threshold.
The demo's own speed-up (+13-20% on these shapes alone, less with other work
beside it) is not large enough for that.

``speedup_round(campaign)``: round 2 of a copy of that slow-base campaign, the
speed-up validated (any verdict), each round's fingerprint recorded as the CLI's round
hook records it.

``build_once(tmp_path_factory, name, build)``: ``build(folder)`` run once per test
session into ``<session tmp>/shared-<name>``, even when pytest-xdist runs the suite in
several workers (they share the session's temporary root; a file lock makes the
others wait for the first); a half-built folder left by a killed worker is built
again, never used.

``run_cli(argv, capsys)``: ``campaign ARGV`` in this process, through
``runner.cli.main`` as the installed command runs it (errors mapped to exit codes):
``(exit code, stdout + stderr)``, or stderr alone with ``stderr_only=True``.

``manifest(**over)``: a validated manifest of a campaign that never runs (records,
renderers, the campaign folder): ``MANIFEST`` with ``over`` on top.

``remove_cache_volumes(campaign)``: remove the docker cache volumes of ``campaign``
(each role's, and the role-less ones of jobs made without a role).

``slow_suite(folder, n, seconds)``: a pytest file of ``n`` tests sleeping ``seconds``
each, for a full test suite that is still running while workers time their turns.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from filelock import FileLock

from runner.executors.factory import make_executor
from runner.flow.baseline import run_baseline
from runner.flow.new_campaign import CampaignFields, create_campaign, fresh_example_copy
from runner.flow.settings import set_gate_field
from runner.store.campaign import Campaign
from runner.store.manifest import Manifest, validate_manifest

# the fields of `manifest()`: a Triton GEMM campaign on the CPU shape set
MANIFEST: dict[str, Any] = {
    "campaign_name": "gemm_triton_cpu_20261129",
    "source": "/src/example",
    "target_op": "gemm",
    "target_backend": "TRITON",
    "target_lang": "TRITON",
    "target_gpu": "cpu",
    "primary_metric": "Combined Step TFLOPS",
    "shape_set": "cpu",
    "test_command": "pytest tests -q",
    "benchmark_command": "python bench.py",
    "created": "2026-11-29 14:05",
}

QUIET = {"repeats": 3, "warmup_s": 0.02, "batch_s": 0.01, "max_repeats": 4, "budget_s": 0.1}

# In quantize_fp8, away from the lines the demo's patches change (both still apply).
SLOW_KERNEL = "turbo_kernels/pytorch/kernels/quantization.py"
SLOW_AT = "    if x.dim() != 2:\n"
WASTE = (
    "    if weight:  # the slow base: the weight quantised twice more, the results dropped\n"
    "        quantize_fp8(x, dtype, granularity, block_size)\n"
    "        quantize_fp8(x, dtype, granularity, block_size)\n"
)
SLOW_COMMIT = "slow base: every FP8 weight quantised three times"


def git(cwd: Path, *args: str) -> str:
    env_args = ["-c", "user.name=t", "-c", "user.email=t@t"]
    return subprocess.run(
        ["git", *env_args, *args], cwd=cwd, capture_output=True, text=True, check=True
    ).stdout


def committed_repo(path: Path) -> Path:
    """A fresh git repository at ``path`` with one commit (a README): a target for
    ``campaign init`` that is never measured."""
    path.mkdir()
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    (path / "README").write_text("target\n")
    git(path, "add", "-A")
    git(path, "commit", "-qm", "base")
    return path


def plant_slow_base(source: Path) -> str:
    """Commit the slow base in ``source``; return the patch that removes the waste."""
    kernel = source / SLOW_KERNEL
    text = kernel.read_text(encoding="utf-8")
    assert text.count(SLOW_AT) == 1, f"{SLOW_KERNEL} no longer has the line {SLOW_AT!r}"
    kernel.write_text(text.replace(SLOW_AT, WASTE + SLOW_AT), encoding="utf-8")
    git(source, "commit", "-q", "-am", SLOW_COMMIT)
    return git(source, "diff", "HEAD", "HEAD~1")


def tiny_campaign(
    root: Path, name: str = "t", *, slow_base: bool = False, baseline: bool = True, **fields: Any
) -> Campaign:
    """See the module docstring; ``fields`` override the manifest's (``executor="docker"``
    measures the baseline in containers); ``baseline=False``: no baseline yet."""
    source = fresh_example_copy(root / "src")
    if slow_base:
        (root / "speedup.patch").write_text(plant_slow_base(source), encoding="utf-8")
    base: dict[str, Any] = {
        "target": "example",
        "source": str(source),
        "target_op": "gemm_fp8",
        "granularity": "blockwise",
        "target_backend": "TORCH",
        "target_gpu": "cpu",
        "shape_set": "tiny",
        "campaign_name": name,
        "timing": QUIET,
    }
    campaign = create_campaign(root / "campaigns", CampaignFields(**(base | fields)))
    if baseline:
        executor = make_executor(campaign.manifest)
        run_baseline(campaign, executor, passes=2, progress=lambda _m: None)
    return Campaign.load(campaign.root)


def on_three_shapes(campaign: Campaign, why: str) -> Campaign:
    """``campaign`` on its first (smallest) three target shapes, all of them
    representative, set by two recorded ``campaign set`` changes giving ``why``: a test
    of what a round does, not of its shapes, prepares, times and re-checks a quarter
    fewer, and the quick level measures every target.  Returns it loaded again."""
    three = json.dumps(list(campaign.manifest.target_shapes)[:3])
    set_gate_field(campaign, "representative_shapes", three, why)
    set_gate_field(campaign, "target_shapes", three, why)
    return Campaign.load(campaign.root)


def speedup_patch(root: Path) -> str:
    """The patch that removes the slow base's waste (``tiny_campaign(slow_base=True)``)."""
    return (root / "speedup.patch").read_text(encoding="utf-8")


def speedup_round(campaign: Campaign) -> None:
    """See the module docstring; ``campaign`` lies in ``<root>/campaigns`` beside its
    ``speedup.patch``."""
    from runner.executors.local import LocalExecutor
    from runner.flow.validate import Request, validate_round
    from runner.store.fingerprint_check import record_fingerprint

    record_fingerprint(campaign, 1, target_commit=campaign.manifest.base_commit)
    campaign = Campaign.load(campaign.root)
    fast = speedup_patch(campaign.root.parent.parent)
    request = Request(2, "quantise the FP8 weight once", fast)
    validate_round(campaign, LocalExecutor(), request, progress=lambda _m: None)
    record_fingerprint(Campaign.load(campaign.root), 2)


def build_once(factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """``build(folder)`` into ``<session tmp>/shared-<name>`` once per session (see the
    module docstring); returns the folder."""
    base = factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / f"shared-{name}"
    done = shared / f"shared-{name}.built"
    with FileLock(str(shared / f"shared-{name}.lock")):
        if not done.exists():
            if folder.exists():  # a worker was killed while building it
                shutil.rmtree(folder)
            folder.mkdir()
            build(folder)
            done.write_text("", encoding="utf-8")
    return folder


def run_cli(
    argv: list[str], capsys: pytest.CaptureFixture[str], *, stderr_only: bool = False
) -> tuple[int, str]:
    """See the module docstring."""
    from runner.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    code = info.value.code
    got = capsys.readouterr()
    return code if isinstance(code, int) else 1, got.err if stderr_only else got.out + got.err


def manifest(**over: Any) -> Manifest:
    """See the module docstring."""
    return validate_manifest(MANIFEST | over, "test")


def remove_cache_volumes(campaign: str) -> None:
    """Remove every docker volume named ``turbo-campaign-<campaign>-...`` (each role's
    Triton and ccache volumes: ``runner.executors.docker_args.cache_volumes``)."""
    from runner.executors.container import safe_name

    prefix = f"turbo-campaign-{safe_name(campaign)}-"
    listed = subprocess.run(
        ["docker", "volume", "ls", "-q", "--filter", f"name={prefix}"],
        capture_output=True,
        text=True,
        check=False,
    )
    for volume in listed.stdout.split():
        if volume.startswith(prefix):
            subprocess.run(
                ["docker", "volume", "rm", "-f", volume], capture_output=True, check=False
            )


SLOW_SUITE = """
import time
import pytest

@pytest.mark.parametrize("i", range({n}))
def test_step(i):
    time.sleep({s})
"""


def slow_suite(folder: Path, n: int, seconds: float) -> Path:
    """``folder/test_slow.py``: ``n`` tests of ``seconds`` each (``SLOW_SUITE``)."""
    path = folder / "test_slow.py"
    path.write_text(SLOW_SUITE.format(n=n, s=seconds))
    return path
