"""Native targets are built in the image once per build key, and that build is what
the gate sees (docs/primus-turbo.md §6: the lineage head is never compiled twice).

The Primus-Turbo-shaped fixture (``tests/data/fake_primus_turbo``: package
``primus_turbo`` with a compiled ``primus_turbo.pytorch._C``) runs as a real
``primus-turbo`` campaign through the DOCKER executor and the CPU image: the baseline
and three rounds of ``benchmarks/rebuild_pipeline.py`` (run ONCE for this module): a
native speed-up compiled and ACCEPTED, a Python-only speed-up that compiles nothing and is
ACCEPTED (so the candidate's own Python file was imported over the cached native build),
and a package that loads its ``_C`` from outside the tree under test: FAILED, never a
number.  Every incumbent is a cache hit: the roles compiled per round after the baseline
are 1, 0 (they were 2, 1 before the build cache).  The script's fourth step, a native
slow-down ROLLED BACK, is left out here: tests/test_build_cache.py walks the same build
keys through it with the local executor (a rolled-back build never becomes the
incumbent's), and tests/test_docker_rounds.py rolls a round back in containers.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from campaign_helpers import remove_cache_volumes

from runner.compare.loop import ROUND_CAP_ENV
from runner.executors.base import BuildJob
from runner.executors.build_cache import BuildCache, build_key, native_inputs
from runner.executors.container import CONTAINER_TARGET
from runner.executors.docker import DockerExecutor
from runner.judge.measuring_caps import ROUND_CAP_S
from runner.store.campaign import Campaign
from runner.store.fingerprint import image_digest
from runner.store.lineage import Lineage
from runner.targets.primus_turbo import PRIMUS_TURBO

ROOT = Path(__file__).resolve().parent.parent
pytestmark = [pytest.mark.rebuild, pytest.mark.docker, pytest.mark.integration]


def load_pipeline() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rebuild_pipeline", ROOT / "benchmarks" / "rebuild_pipeline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rebuild_pipeline", module)  # dataclasses look their module up
    spec.loader.exec_module(sys.modules["rebuild_pipeline"])
    return sys.modules["rebuild_pipeline"]


@dataclass
class Pipeline:
    campaign: Campaign
    rounds: dict[str, Any]  # step name -> rebuild_pipeline.Outcome
    image: str


def docker_out(*args: str) -> str:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, check=False)
    return proc.stdout


@pytest.fixture(scope="module")
def pipeline(cpu_image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    probe = subprocess.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--entrypoint",
            "sh",
            cpu_image,
            "-c",
            'command -v gcc && test -f "$(python3 -c '
            '\'import sysconfig; print(sysconfig.get_paths()["include"])\')/Python.h"',
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.returncode != 0:
        pytest.fail(
            f"{cpu_image} has no C compiler or Python headers (docker/Dockerfile.cpu installs "
            f"them): rebuild it with docker/ci-setup.sh\n{probe.stdout}{probe.stderr}"
        )
    module = load_pipeline()
    root = tmp_path_factory.mktemp("rebuild")
    # The suite's 45 s cap (tests/conftest.py) held 2 docker pairs on a loaded CI
    # machine and rolled the Python-only speed-up back as too volatile; the product's
    # quick cap gives the clear rounds room, and they stop early anyway.  At dd93c80
    # (2026-12-04) a loaded machine read that speed-up (then one native call of four)
    # as +4.56% ± 15.44%: it now drops three of six, about twice as fast.
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(ROUND_CAP_ENV, str(ROUND_CAP_S["quick"]))
        steps = tuple(s for s in module.STEPS if s.name != "native-slowdown")
        campaign, outcomes = module.run_pipeline(
            root, executor="docker", image=cpu_image, steps=steps, say=lambda _m: None
        )
    yield Pipeline(campaign, {o.step: o for o in outcomes}, cpu_image)
    for entry in BuildCache.for_campaign(campaign.root).entries():
        subprocess.run(["docker", "image", "rm", "-f", str(entry.image)], capture_output=True)
    remove_cache_volumes(campaign.name)  # each role's


def builds(outcome: Any) -> dict[str, dict[str, Any]]:
    return {b["role"]: b for b in outcome.builds}


def provenance(campaign: Campaign, n: int, job: str) -> dict[str, Any]:
    path = campaign.artifacts_dir(n) / "passes" / job / "provenance.json"
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_campaign_runs_the_image_recorded_by_id(pipeline: Pipeline) -> None:
    m = pipeline.campaign.manifest
    assert (m.target, m.executor, m.image) == ("primus-turbo", "docker", pipeline.image)
    assert m.image_id == image_digest(pipeline.image)
    base = builds_json(pipeline.campaign, 1)
    assert [(b["role"], b["build"]) for b in base] == [("baseline", "compile")]
    install = base[0]["commands"][2]
    assert install[2:] == ["pip", "install", "--no-build-isolation", "-e", ".", "-v"]


def test_the_lineage_head_is_compiled_once(pipeline: Pipeline) -> None:
    """Compiled roles per round after the baseline: 1, 0 (the incumbent is always a
    cache hit: the baseline's build, then the accepted candidate's), with times."""
    steps = ("native-speedup", "python-only")
    assert [pipeline.rounds[s].compiled for s in steps] == [1, 0]
    for step in steps:
        assert pipeline.rounds[step].ok, pipeline.rounds[step].builds
        assert all(b["seconds"] > 0 for b in pipeline.rounds[step].builds)
    base_key = builds_json(pipeline.campaign, 1)[0]["key"]
    fast, py = (builds(pipeline.rounds[s]) for s in steps)
    assert fast["incumbent"]["key"] == base_key
    # the accepted candidate's build is the next round's incumbent's, and only a
    # change of a native file changes the key
    assert py["incumbent"]["key"] == fast["candidate"]["key"] != base_key
    assert py["candidate"]["key"] == py["incumbent"]["key"]
    status = BuildCache.for_campaign(pipeline.campaign.root).status_lines()
    assert status[0][1].split(": ")[1].startswith("2 entries")  # base, speed-up


def builds_json(campaign: Campaign, n: int) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(
        (campaign.artifacts_dir(n) / "builds.json").read_text(encoding="utf-8")
    )
    return data


def test_a_native_speedup_is_rebuilt_and_accepted(pipeline: Pipeline) -> None:
    out = pipeline.rounds["native-speedup"]
    assert out.status == "ACCEPTED", out.reasons
    assert out.delta_pct > 5.0
    roles = builds(out)
    assert (roles["incumbent"]["build"], roles["candidate"]["build"]) == ("hit", "compile")
    assert "native or build files (csrc/kernels/gemm/gemm_config.h)" in roles["candidate"]["reason"]
    log = pipeline.campaign.artifacts_dir(out.round) / "passes/build-candidate/build.log"
    assert "gemm.c" in log.read_text(encoding="utf-8")  # compiled in the build container
    summary = pipeline.campaign.summary_path(out.round).read_text(encoding="utf-8")
    assert "build: incumbent cache hit" in summary and "candidate compiled" in summary


def test_a_python_only_change_reuses_the_native_build_and_is_what_runs(
    pipeline: Pipeline,
) -> None:
    out = pipeline.rounds["python-only"]
    roles = builds(out)
    assert (roles["incumbent"]["build"], roles["candidate"]["build"]) == ("hit", "reuse")
    assert "reused the incumbent's native build" in roles["candidate"]["reason"]
    # The candidate's own Python file was imported over the reused native library:
    # dropping the forward's three checking native calls is a measured speed-up.
    assert out.status == "ACCEPTED", out.reasons
    assert out.delta_pct > 5.0
    summary = pipeline.campaign.summary_path(out.round).read_text(encoding="utf-8")
    assert "reused the incumbent's native build" in summary


def test_each_pass_proves_it_measured_the_built_tree(pipeline: Pipeline) -> None:
    n = pipeline.rounds["python-only"].round
    passes = pipeline.campaign.artifacts_dir(n) / "passes"
    jobs = sorted(p.name for p in passes.glob("pass-*"))
    assert jobs, "no passes recorded"
    for job in jobs:
        record = provenance(pipeline.campaign, n, job)
        assert record["error"] is None
        assert record["expected_root"] == CONTAINER_TARGET
        so = record["modules"]["primus_turbo.pytorch._C"]
        assert so.startswith(f"{CONTAINER_TARGET}/primus_turbo/pytorch/_C") and so.endswith(".so")
        image = json.loads((passes / job / "image.json").read_text(encoding="utf-8"))
        assert image["image"].startswith("turbo-campaign-build/")  # the role's built image
    left = docker_out("images", "-q", f"turbo-campaign-build/{pipeline.campaign.name.lower()}")
    assert left.strip() == "", "per-round build images must be removed at the end of the round"


def test_a_library_loaded_from_outside_the_tree_fails_the_round(pipeline: Pipeline) -> None:
    out = pipeline.rounds["outside-import"]
    assert out.status == "FAILED"
    assert out.delta_pct is None  # never a number
    assert "refused to measure" in out.reasons[0]
    # the copy is what the package uses: as its _C attribute, and (a C extension loaded
    # under that name) the import system's entry too
    assert re.search(r"primus_turbo\.pytorch\._C( \(attribute\))? from /tmp/", out.reasons[0])
    n = out.round
    cand = next(
        p.name for p in (pipeline.campaign.artifacts_dir(n) / "passes").glob("pass-*-candidate")
    )
    assert provenance(pipeline.campaign, n, cand)["error"]
    assert pipeline.campaign.load_result(n).status.value == "FAILED"
    lineage = Lineage(Path(pipeline.campaign.manifest.source), pipeline.campaign.name, None)
    head_init = lineage.git("show", f"{lineage.head()}:primus_turbo/pytorch/__init__.py")
    assert "tempfile" not in head_init  # nothing of the failed round reached the lineage


def test_a_corrupted_cached_image_is_rebuilt_never_used(cpu_image: str, tmp_path: Path) -> None:
    """Without a campaign: the fixture compiled into the cache's image, that image's
    ``_C`` then changed in place (same tag, same index entry): the next build of the
    key finds the checksums differ, removes the entry and compiles again."""
    tree = load_pipeline().fixture_repo(tmp_path / "src")
    cache = BuildCache(tmp_path / "cache")
    executor = DockerExecutor(
        cpu_image, gpu=None, campaign=f"corrupt-{tmp_path.name}", caches=False
    )
    commands = tuple(tuple(c) for c in PRIMUS_TURBO.build_commands(None, in_place=False))
    inputs = native_inputs(tree, lambda p: PRIMUS_TURBO.needs_rebuild([p]))
    key = build_key(inputs, gpu_archs=None, commands=commands, identity=executor.build_identity())

    def prepare(n: int) -> Any:
        job = BuildJob("baseline", n, tree, tmp_path / f"b{n}", key, cache, commands=commands)
        built = executor.prepare_role(job)
        executor.release_role(built)
        return built

    try:
        assert prepare(1).outcome == "compile"
        tag = cache.lookup(key)[0].image  # type: ignore[union-attr]
        name = f"corrupt-{tmp_path.name}"
        so = f"{CONTAINER_TARGET}/primus_turbo/pytorch/_C*.so"
        # through the image's own entrypoint, so the committed image keeps it
        docker_out(
            "run",
            "--name",
            name,
            "--network",
            "none",
            str(tag),
            "sh",
            "-c",
            f'for f in {so}; do printf x >> "$f"; done',
        )
        docker_out("commit", "--change", 'CMD ["/bin/bash"]', name, str(tag))
        docker_out("rm", "-f", name)
        again = prepare(2)
        assert again.outcome == "compile" and "corrupted" in again.reason
        assert "FAILED" in again.log_path.read_text(encoding="utf-8")  # sha256sum -c said
    finally:
        for entry in cache.entries():
            docker_out("image", "rm", "-f", str(entry.image))
