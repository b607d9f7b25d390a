"""Native targets are built per role per round, in the image, and that build is what the
gate sees (issue 15, item 6).

The Primus-Turbo-shaped fixture (``tests/data/fake_primus_turbo``: package
``primus_turbo`` with a compiled ``primus_turbo.pytorch._C``) runs as a real
``primus-turbo`` campaign through the DOCKER executor and the CPU image: the baseline
and four rounds of ``benchmarks/rebuild_pipeline.py`` (run ONCE for this module): a
native slow-down rebuilt and ROLLED BACK, a native speed-up rebuilt and ACCEPTED, a
Python-only speed-up that skips the rebuild and is ACCEPTED (so the candidate's own
Python file was imported over the reused native build), and a package that loads its
``_C`` from outside the tree under test: FAILED, never a number.
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

from runner.executors.base import BuildJob
from runner.executors.container import CONTAINER_TARGET
from runner.executors.docker import image_digest
from runner.executors.local import LocalExecutor
from runner.flow.build import plan_builds
from runner.store.campaign import Campaign
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
        ["docker", "run", "--rm", "--network", "none", "--entrypoint", "sh", cpu_image, "-c",
         'command -v gcc && test -f "$(python3 -c '
         "'import sysconfig; print(sysconfig.get_paths()[\"include\"])')/Python.h\""],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if probe.returncode != 0:
        pytest.fail(
            f"{cpu_image} has no C compiler or Python headers (docker/Dockerfile.cpu installs "
            f"them): rebuild it with docker/ci-setup.sh\n{probe.stdout}{probe.stderr}"
        )
    module = load_pipeline()
    root = tmp_path_factory.mktemp("rebuild")
    campaign, outcomes = module.run_pipeline(
        root, executor="docker", image=cpu_image, say=lambda _m: None
    )
    yield Pipeline(campaign, {o.step: o for o in outcomes}, cpu_image)
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
    assert [(b["role"], b["rebuilt"]) for b in base] == [("baseline", True)]
    install = base[0]["commands"][2]
    assert install[2:] == ["pip", "install", "--no-build-isolation", "-e", ".", "-v"]


def builds_json(campaign: Campaign, n: int) -> list[dict[str, Any]]:
    data: list[dict[str, Any]] = json.loads(
        (campaign.artifacts_dir(n) / "builds.json").read_text(encoding="utf-8")
    )
    return data


def test_a_native_slowdown_is_rebuilt_and_rolled_back(pipeline: Pipeline) -> None:
    out = pipeline.rounds["native-slowdown"]
    assert out.status == "ROLLED BACK", out.reasons
    # 6 sweeps instead of 3: twice the native work; on a loaded 2-core machine the
    # measured size of a third more work varied (-2.7% to -19%, once +5%): doubled,
    # its direction and the verdict hold
    assert out.delta_pct < 0
    roles = builds(out)
    assert roles["incumbent"]["rebuilt"] and roles["candidate"]["rebuilt"]
    assert "native or build files (csrc/kernels/gemm/gemm_config.h)" in roles["candidate"]["reason"]
    log = pipeline.campaign.artifacts_dir(out.round) / "passes/build-candidate/build.log"
    assert "gemm.c" in log.read_text(encoding="utf-8")  # compiled in the build container


def test_a_native_speedup_is_rebuilt_and_accepted(pipeline: Pipeline) -> None:
    out = pipeline.rounds["native-speedup"]
    assert out.status == "ACCEPTED", out.reasons
    assert out.delta_pct > 5.0
    assert builds(out)["candidate"]["rebuilt"] is True
    summary = pipeline.campaign.summary_path(out.round).read_text(encoding="utf-8")
    assert "build: incumbent rebuilt" in summary and "candidate rebuilt" in summary


def test_a_python_only_change_reuses_the_native_build_and_is_what_runs(
    pipeline: Pipeline,
) -> None:
    out = pipeline.rounds["python-only"]
    roles = builds(out)
    assert roles["incumbent"]["rebuilt"] is True
    assert roles["candidate"]["rebuilt"] is False
    assert "reused the incumbent's native build" in roles["candidate"]["reason"]
    # The candidate's own Python file was imported over the reused native library:
    # dropping the forward's second native call is a measured speed-up.
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


# ---- without docker: the plan, and the local executor's in-place build and reuse ------
def test_plan_builds_reuses_only_for_a_change_without_native_files(tmp_path: Path) -> None:
    roles = {"candidate": tmp_path / "c", "incumbent": tmp_path / "i"}
    py = ["primus_turbo/pytorch/ops/gemm_fp8.py"]
    native = ["csrc/kernels/gemm/gemm.c", *py]
    assert PRIMUS_TURBO.needs_rebuild(native) and not PRIMUS_TURBO.needs_rebuild(py)
    plan = plan_builds(roles, py, needs_rebuild=False)
    assert [(p.role, p.reuse_from) for p in plan] == [
        ("incumbent", None),
        ("candidate", "incumbent"),
    ]
    plan = plan_builds(roles, native, needs_rebuild=True)
    assert [(p.role, p.reuse_from) for p in plan] == [("incumbent", None), ("candidate", None)]
    assert [p.reuse_from for p in plan_builds({"baseline": tmp_path}, None, False)] == [None]


def test_local_in_place_build_and_reuse(tmp_path: Path) -> None:
    """The local executor builds each role's tree in place (the tree the worker imports)
    and lays the incumbent's build products into a Python-only candidate."""
    if subprocess.run(["sh", "-c", "command -v cc"], capture_output=True).returncode != 0:
        pytest.skip("no C compiler on this host (the docker tests build in the image)")
    module = load_pipeline()
    inc = module.fixture_repo(tmp_path / "inc")
    cand = module.fixture_repo(tmp_path / "cand")
    executor = LocalExecutor()
    commands = tuple(tuple(c) for c in PRIMUS_TURBO.build_commands(None, in_place=True))
    built = executor.prepare_role(
        BuildJob("incumbent", 2, inc, tmp_path / "b-inc", commands=commands, reason="rebuilt")
    )
    products = sorted(p.name for p in (inc / "primus_turbo" / "pytorch").glob("_C*.so"))
    assert built.rebuilt and len(products) == 1
    changed = ("primus_turbo/pytorch/ops/gemm_fp8.py",)
    reused = executor.prepare_role(
        BuildJob("candidate", 2, cand, tmp_path / "b-cand", reuse=built, changed=changed)
    )
    assert not reused.rebuilt
    assert (cand / "primus_turbo" / "pytorch" / products[0]).is_file()
    assert "reused the incumbent build" in reused.log_path.read_text(encoding="utf-8")
