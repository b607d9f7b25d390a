"""Rounds end to end through the docker executor on the CPU test image.

The campaign's manifest names ``executor: docker`` and the CPU image, and
``make_executor`` builds the executor from it, as ``campaign baseline``/``validate`` do.
Every worker job (focused test, passes, quick script) runs in its own container.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from campaign_helpers import remove_cache_volumes, tiny_campaign

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.errors import InfrastructureError
from runner.core.outcomes import RoundResult, Status
from runner.executors.docker import DockerExecutor
from runner.executors.factory import make_executor
from runner.flow.baseline import run_baseline
from runner.flow.new_campaign import EXAMPLES_DIR
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign
from runner.store.fingerprint import image_digest
from runner.store.lineage import Lineage

pytestmark = [pytest.mark.docker, pytest.mark.integration]

PATCHES = EXAMPLES_DIR / "demo_patches"
REDTEAM = Path(__file__).parent / "data" / "redteam"
LABEL = "turbo-campaign.campaign"


def containers(name: str, *extra: str) -> list[str]:
    args = ["docker", "ps", "-a", "-q", "--filter", f"label={LABEL}={name}", *extra]
    return subprocess.run(args, capture_output=True, text=True, check=True).stdout.split()


def new_campaign(root: Path, image: str, *, baseline: bool = True) -> Campaign:
    """The helpers' tiny campaign in containers, under a name of its own (the next
    command of a campaign of the same name clears its containers)."""
    name = f"dk-{uuid.uuid4().hex[:8]}"
    return tiny_campaign(root, name, baseline=baseline, executor="docker", image=image)


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory, cpu_image: str) -> Iterator[tuple[Path, str]]:
    """The docker campaign with its baseline (in containers), built once for the module's
    tests: (its folder, its name)."""
    root = tmp_path_factory.mktemp("docker-rounds")
    c = new_campaign(root, cpu_image)
    yield root, c.name
    remove_cache_volumes(c.name)


@pytest.fixture
def campaign(
    base: tuple[Path, str], tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> Campaign:
    """A private copy of the module's campaign and its source (the same name: the tests
    run one after the other, and each asserts no container of it is left)."""
    return Campaign.load(copy_campaign(base[0], tmp_path / "c", base[1]))


def lineage(c: Campaign) -> Lineage:
    return Lineage(Path(c.manifest.source), c.name, f"optimize/{c.name}")


def run(c: Campaign, n: int, hypothesis: str, patch: str) -> RoundResult:
    return validate_round(
        c, make_executor(c.manifest), Request(n, hypothesis, patch), progress=lambda _m: None
    )


def test_baseline_a_killed_container_rollback_and_accept_in_containers(
    campaign: Campaign, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The baseline's records in containers; round 2's measuring container killed
    (``docker kill``: the worker exits 137, the round is recorded FAILED, no score, the
    lineage does not move); round numbers are never reused, so the next rounds are 3 (a
    slow-down, ROLLED BACK) and 4 (round 2's patch run again, any clean verdict)."""
    c = campaign
    executor = make_executor(c.manifest)
    assert isinstance(executor, DockerExecutor) and executor.campaign == c.name
    assert c.closed_rounds() == [1]
    assert c.manifest.sigma_g is not None and c.manifest.representative_shapes
    art1 = c.artifacts_dir(1)
    assert (art1 / "quick_baseline.log").read_text().startswith("$ python ")
    job = art1 / "passes" / "pass-01-baseline"
    assert (job / "container.log").is_file() and (job / "benchmark.csv").is_file()
    tag = str(c.manifest.image)
    # init recorded the image by id: every job runs exactly that image, not the tag
    assert c.manifest.image_id == image_digest(tag)
    assert json.loads((job / "image.json").read_text()) == {
        "image": c.manifest.image_id,
        "image_digest": image_digest(tag),
    }
    run_line = (job / "docker_run.txt").read_text()
    assert "\ndocker run --rm --init --pull never --network none " in run_line
    assert "turbo-campaign.job=pass-01-baseline " in run_line
    lin = lineage(c)
    base = lin.head()

    killed: list[str] = []

    def killer() -> None:
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            found = containers(
                c.name,
                "--filter",
                "label=turbo-campaign.job=pass-01-incumbent",
                "--filter",
                "status=running",
            )
            if found:
                subprocess.run(["docker", "kill", *found], capture_output=True, check=False)
                killed.extend(found)
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    fast = (PATCHES / "speedup_reuse_fp8_weight.patch").read_text()
    r2 = run(c, 2, "reuse fp8 weight", fast)
    thread.join(timeout=10)
    assert killed, "no container of the campaign was seen running"
    assert r2.status is Status.FAILED
    assert "pass-01-incumbent failed (exit 137)" in r2.reasons[0]
    assert lin.head() == base
    assert containers(c.name) == []
    assert c.result_path(2).is_file()  # the FAILED round is recorded (no score)
    assert "| round-2 | FAILED |" in c.trend_log.read_text()
    assert c.next_round() == 3

    # the slow-down (about -25% a pair) is rolled back on its first pairs: they are final
    # (a verdict still unclear there is rolled back too, and its gain is as negative)
    monkeypatch.setenv(ROUND_CAP_ENV, "1")
    slow = (PATCHES / "slowdown_fp64_accumulate.patch").read_text()
    r3 = validate_round(c, executor, Request(3, "fp64 accumulate", slow), progress=lambda _m: None)
    assert r3.status is Status.ROLLED_BACK, r3.reasons
    assert r3.gate is not None and r3.gate.delta_pct < 0
    assert lin.head() == base
    assert c.result_path(3).is_file()
    # its pairs were serving workers in containers, each turn read by the container's
    # cgroup (``ContainerWorker.cpu_clock``), the other role's container paused
    logs = sorted(c.artifacts_dir(3).glob("turns*.jsonl"))
    turns = [json.loads(t) for log in logs for t in log.read_text().splitlines()]
    assert turns and all(isinstance(t.get("foreign_cpu_s"), float) for t in turns), turns

    # CPU timing in a container is noisy: ACCEPTED is expected (the demo patch removes a
    # re-quantisation per call), but any clean verdict with its records is correct; so
    # its first pairs are final too, not pairs measured up to the suite's cap
    r4 = validate_round(c, executor, Request(4, "reuse fp8 weight", fast), progress=lambda _m: None)
    assert r4.status in (Status.ACCEPTED, Status.ROLLED_BACK), r4.reasons
    assert c.result_path(4).is_file() and r4.gate is not None
    if r4.status is Status.ACCEPTED:
        assert lin.head() == r4.commit and lin.parent(lin.head()) == base
    else:
        assert lin.head() == base
    trend = c.trend_log.read_text()
    assert "| round-3 | ROLLED BACK |" in trend and "| round-4 |" in trend
    assert c.closed_rounds() == [1, 2, 3, 4]
    assert containers(c.name) == []


def test_a_daemon_that_is_not_running_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    c = new_campaign(tmp_path, "turbo-campaign/cpu:py311", baseline=False)
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such-docker.sock")
    with pytest.raises(InfrastructureError, match="Docker daemon is not reachable"):
        run_baseline(c, make_executor(c.manifest), passes=2, progress=lambda _m: None)
    assert c.closed_rounds() == []
    assert not c.result_path(1).exists()


def test_a_helper_detached_in_a_container_is_refused_by_the_cgroup_guard(
    campaign: Campaign,
) -> None:
    """The red team's detached engine (tests/data/redteam/detached_helper_engine.patch: a
    helper double-forked into a session of its own that spins while its worker lives)
    in a docker round: it stays in the container's cgroup, which the host reads around
    each timed turn, so the round is FAILED by the cgroup CPU guard naming the worker.
    (The host-owned records are checked the same way under every executor: every docker
    round above goes through them; tests/test_redteam.py plants rescaled records.)"""
    c = campaign
    head = lineage(c).head()
    engine = (REDTEAM / "detached_helper_engine.patch").read_text(encoding="utf-8")
    result = run(c, 2, "an engine beside the op", engine)
    assert result.status is Status.FAILED, result.reasons
    assert any("cgroup CPU guard" in r and "-candidate" in r for r in result.reasons)
    assert lineage(c).head() == head
    assert containers(c.name) == []
