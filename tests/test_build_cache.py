"""The native build cache (docs/primus-turbo.md §6), local executor: real git trees of the
Primus-Turbo-shaped fixture, its real C extension compiled with the host's compiler
(a second or two each), a real campaign folder (no baseline: ``built_roles`` is driven
directly, as a round drives it).

The lineage head is compiled once, a Python-only candidate reuses its build, an
accepted candidate's build is the next incumbent's; two trees that differ only in a
native file never share a build; a corrupted or half-written entry is rebuilt, never
used.  The same pipeline through docker and a whole campaign: tests/test_rebuild.py.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from runner.core.artifact_names import BUILDS
from runner.core.errors import Tampered
from runner.executors.build_cache import COMPLETE, PRODUCTS, BuildCache
from runner.executors.isolation import ISOLATION_ENV, isolation_works
from runner.executors.local import LocalExecutor
from runner.render.status import collect_status
from runner.round.build import built_roles
from runner.round.context import FocusedTest, RoundPlan
from runner.round.judge_files import judge_digests, restore_judge
from runner.store.campaign import Campaign

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.integration  # real git trees, a real compiler
needs_cc = pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler on this host")


def pipeline() -> ModuleType:
    path = ROOT / "benchmarks" / "rebuild_pipeline.py"
    spec = importlib.util.spec_from_file_location("rebuild_pipeline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rebuild_pipeline", module)
    spec.loader.exec_module(sys.modules["rebuild_pipeline"])
    return sys.modules["rebuild_pipeline"]


def tree(repo: Path, dest: Path, edits: dict[str, tuple[str, str]] | None = None) -> Path:
    """A fresh clone of ``repo`` with ``edits`` (path -> (old, new)) applied."""
    subprocess.run(["git", "clone", "-q", str(repo), str(dest)], check=True)
    for rel, (old, new) in (edits or {}).items():
        path = dest / rel
        text = path.read_text(encoding="utf-8")
        assert old in text, rel
        path.write_text(text.replace(old, new), encoding="utf-8")
    return dest


def build(
    campaign: Campaign, tmp: Path, n: int, roles: dict[str, Path], changed: Any = None
) -> dict[str, Any]:
    """One round's builds (role -> its builds.json record); ``changed``: the
    candidate's edits."""
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _m: None, tmp / f"r{n}", n, "quick")
    with built_roles(rnd, roles, sorted(changed) if changed else None):
        record = json.loads((rnd.tmp / BUILDS).read_text(encoding="utf-8"))
    return {b["role"]: b for b in record}


def loaded_c(root: Path) -> str:
    """Where ``primus_turbo.pytorch._C`` is imported from in ``root`` (no torch)."""
    code = "import importlib.util as u; print(u.find_spec('primus_turbo.pytorch._C').origin)"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    )
    return proc.stdout.strip()


SLOWER = {"csrc/kernels/gemm/gemm_config.h": ("SWEEPS 3", "SWEEPS 6")}
FASTER = {"csrc/kernels/gemm/gemm_config.h": ("SWEEPS 3", "SWEEPS 2")}
OPS_PY = "primus_turbo/pytorch/ops/gemm_fp8.py"
PY_ONLY = {OPS_PY: ("VERIFY_FORWARD = True", "VERIFY_FORWARD = False")}


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> tuple[Campaign, Path]:
    root = tmp_path_factory.mktemp("cache")
    campaign = pipeline().new_campaign(root, "local", None, "cpu")
    return campaign, root


@needs_cc
def test_the_head_is_compiled_once_and_an_accepted_build_is_the_next_incumbents(
    made: tuple[Campaign, Path],
) -> None:
    campaign, root = made
    repo = Path(campaign.manifest.source)
    t = root / "trees"
    # the baseline, then round 2: a native slow-down (rolled back); round 3: a native
    # speed-up (accepted); round 4: a Python-only change on the accepted speed-up
    r1 = build(campaign, t, 1, {"baseline": tree(repo, t / "b1")})
    r2 = build(
        campaign,
        t,
        2,
        {"incumbent": tree(repo, t / "i2"), "candidate": tree(repo, t / "c2", SLOWER)},
        SLOWER,
    )
    r3 = build(
        campaign,
        t,
        3,
        {"incumbent": tree(repo, t / "i3"), "candidate": tree(repo, t / "c3", FASTER)},
        FASTER,
    )
    inc4 = tree(repo, t / "i4", FASTER)
    cand4 = tree(repo, t / "c4", {**FASTER, **PY_ONLY})
    r4 = build(campaign, t, 4, {"incumbent": inc4, "candidate": cand4}, PY_ONLY)
    assert r1["baseline"]["build"] == "compile"
    got = [(r["incumbent"]["build"], r["candidate"]["build"]) for r in (r2, r3, r4)]
    assert got == [("hit", "compile"), ("hit", "compile"), ("hit", "reuse")]
    compiled = [sum(b["build"] == "compile" for b in r.values()) for r in (r2, r3, r4)]
    assert compiled == [1, 1, 0]  # was 2, 2, 1: the head compiled again every round
    assert r2["incumbent"]["key"] == r3["incumbent"]["key"] == r1["baseline"]["key"]
    assert r4["incumbent"]["key"] == r3["candidate"]["key"] != r3["incumbent"]["key"]
    seconds = [(b["build"], b["seconds"]) for r in (r1, r2, r3, r4) for b in r.values()]
    assert all(s > 0 if build == "compile" else s >= 0 for build, s in seconds)
    assert "reused the incumbent's native build" in r4["candidate"]["reason"]
    # each role imports the build laid into its own tree, never another tree's
    for role_tree in (inc4, cand4):
        assert Path(loaded_c(role_tree)).parent == role_tree / "primus_turbo" / "pytorch"
    # campaign status lists the three builds (base, slow-down, speed-up)
    lines = dict(collect_status(campaign).extra)
    assert "3 entries" in lines["build cache"]
    assert sum(1 for k in lines if k.startswith("build ") and k != "build cache") == 3


@needs_cc
def test_trees_differing_only_in_a_native_file_never_share_a_build(
    made: tuple[Campaign, Path],
) -> None:
    campaign, root = made
    repo = Path(campaign.manifest.source)
    t = root / "native"
    a, b = tree(repo, t / "a", FASTER), tree(repo, t / "b", SLOWER)
    one = build(campaign, t, 2, {"baseline": a})["baseline"]
    other = build(campaign, t, 3, {"baseline": b})["baseline"]
    assert one["key"] != other["key"]
    cache = BuildCache.for_campaign(campaign.root)

    def lib(where: Path) -> bytes:
        return next(where.rglob("_C*.so")).read_bytes()

    # each tree got the build of its own key, and the two compiled kernels differ
    assert lib(a / "primus_turbo") == lib(cache.root / one["key"] / PRODUCTS)
    assert lib(b / "primus_turbo") == lib(cache.root / other["key"] / PRODUCTS)
    assert lib(a / "primus_turbo") != lib(b / "primus_turbo")


@needs_cc
@pytest.mark.parametrize("damage", ["corrupt", "half-written"])
def test_a_damaged_entry_is_rebuilt_never_used(made: tuple[Campaign, Path], damage: str) -> None:
    campaign, root = made
    repo = Path(campaign.manifest.source)
    t = root / damage
    first = build(campaign, t, 2, {"baseline": tree(repo, t / "a")})["baseline"]
    cache = BuildCache.for_campaign(campaign.root)
    entry = cache.root / first["key"]
    lib = next((entry / PRODUCTS).rglob("_C*.so"))
    if damage == "corrupt":
        lib.write_bytes(lib.read_bytes()[:-64] + b"\0" * 64)  # same size, other bytes
    else:
        (entry / COMPLETE).unlink()  # as if the writer died before the marker
    fresh = tree(repo, t / "b")
    again = build(campaign, t, 3, {"baseline": fresh})["baseline"]
    assert (again["key"], again["build"]) == (first["key"], "compile")
    assert "unusable" in again["reason"]
    want = "does not match its checksum" if damage == "corrupt" else "half-written"
    assert want in again["reason"]
    # the rebuilt entry is whole again and the tree imports its own fresh build
    assert cache.lookup(first["key"])[0] is not None
    assert Path(loaded_c(fresh)).is_relative_to(fresh)


# Put at the top of a candidate's setup.py: it overwrites the incumbent's compiled
# extension (laid into the incumbent's tree before the candidate builds).
PLANT = """
import glob
for _so in glob.glob({pattern!r}):
    try:
        with open(_so, "r+b") as _fh:
            _fh.write(b"planted")
        print("fixture: planted " + _so, flush=True)
    except OSError as _exc:
        print("fixture: could not plant " + _so + ": " + str(_exc), flush=True)
"""


def hostile_round(campaign: Campaign, t: Path, n: int) -> tuple[Path, dict[str, Any] | None]:
    """Round ``n``: the incumbent, then a candidate whose setup.py plants bytes in the
    incumbent's ``_C``; the incumbent's tree and the round's builds (None: Tampered)."""
    repo = Path(campaign.manifest.source)
    inc = tree(repo, t / f"i{n}")
    pattern = str(inc / "primus_turbo" / "pytorch" / "_C*.so")
    setup = {"setup.py": ("import sys\n", "import sys\n" + PLANT.format(pattern=pattern))}
    cand = tree(repo, t / f"c{n}", setup)
    return inc, build(campaign, t, n, {"incumbent": inc, "candidate": cand}, setup)


@needs_cc
@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_a_candidates_build_cannot_rewrite_the_incumbents_build(
    made: tuple[Campaign, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The candidate's build commands (its setup.py: arbitrary code) run with the
    incumbent's tree read-only: the write fails and the incumbent keeps its own
    ``_C``.  Without the namespace the write lands, and the round's builds fail as
    tampered (``BuildWatch``) before anything is tested or measured."""
    campaign, root = made
    t = root / "hostile"
    inc, builds = hostile_round(campaign, t, 5)
    assert builds is not None and builds["candidate"]["build"] == "compile"
    so = next((inc / "primus_turbo" / "pytorch").glob("_C*.so"))
    assert not so.read_bytes().startswith(b"planted")
    log = (t / "r5" / "build-candidate" / "build.log").read_text(encoding="utf-8")
    assert "fixture: could not plant" in log and "Read-only file system" in log, log
    monkeypatch.setenv(ISOLATION_ENV, "off")
    with pytest.raises(Tampered) as info:
        hostile_round(campaign, t, 6)
    text = str(info.value)
    assert "the incumbent's tree" in text and "changed after its own build" in text
    assert "primus_turbo/pytorch/_C" in text


HOLLOW = """
import pathlib
for _test in pathlib.Path("tests").rglob("test_*.py"):
    _test.write_text("def test_nothing():\\n    pass\\n")
    print("fixture: hollowed " + str(_test), flush=True)
"""


@needs_cc
def test_a_candidates_build_that_rewrites_its_restored_focused_test_fails_as_tampered(
    made: tuple[Campaign, Path],
) -> None:
    """docs/reliability.md §7 row 2's build half: the lineage head's focused test files are restored
    in the candidate's tree, then the candidate's own build runs there (its setup.py:
    arbitrary code) and hollows them.  The worker checks the files against the head's
    right before the test command: the round fails as TAMPERED naming the file, and the
    hollowed test never runs."""
    campaign, root = made
    m, t = campaign.manifest, root / "hollow"
    repo = Path(m.source)
    inc = tree(repo, t / "i")
    setup = {"setup.py": ("import sys\n", "import sys\n" + HOLLOW)}
    cand = tree(repo, t / "c", setup)
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _m: None, t / "r7", 7, "quick")
    # what a round does (runner.flow.validate): restore, then build, then the focused test
    assert restore_judge(m, inc, cand, sorted(setup)) == []
    expect = judge_digests(m, inc, sorted(setup))
    named = [rel for rel, digest in expect.items() if digest]
    assert named and all(rel.startswith("tests/") for rel in named), expect
    roles = {"incumbent": inc, "candidate": cand}
    with (
        built_roles(rnd, roles, sorted(setup)) as built,
        FocusedTest(built.plan, "candidate", cand, expect) as test,
        pytest.raises(Tampered) as info,
    ):
        test.wait()
    assert (cand / named[0]).read_text(encoding="utf-8").startswith("def test_nothing")
    text = str(info.value)
    assert text.startswith("TAMPERED") and named[0] in text and "candidate" in text, text
    assert info.value.guard == "judge files" and named[0] in info.value.problems
    log = (rnd.tmp / "test-candidate").rglob("test.log")
    assert any("not run" in p.read_text(encoding="utf-8") for p in log)


def test_a_changed_requirements_file_is_another_build(tmp_path: Path) -> None:
    """The build key: the install reads requirements.txt (``pip install -r``), so two trees
    that differ only there never share a build; a Python-only difference still does."""
    from runner.executors.build_cache import build_key, native_inputs
    from runner.targets.primus_turbo import PRIMUS_TURBO

    repo = pipeline().fixture_repo(tmp_path / "repo")
    a = tree(repo, tmp_path / "a")
    b = tree(repo, tmp_path / "b", {"requirements.txt": ("torch", "torch==2.5.1")})
    c = tree(repo, tmp_path / "c", PY_ONLY)

    def key(root: Path) -> str:
        inputs = native_inputs(root, lambda p: PRIMUS_TURBO.needs_rebuild([p]))
        commands = PRIMUS_TURBO.build_commands("gfx942", in_place=False)
        return build_key(inputs, gpu_archs="gfx942", commands=commands, identity="image")

    assert ["pip", "install", "-r", "requirements.txt"] in PRIMUS_TURBO.install_commands()
    assert "requirements.txt" in native_inputs(a, lambda p: PRIMUS_TURBO.needs_rebuild([p]))
    assert key(a) != key(b)
    assert key(a) == key(c)


def test_the_least_recently_used_entries_are_evicted_past_the_limit(tmp_path: Path) -> None:
    """Real files, no compiler: three 1 MiB builds in a 2.5 MiB cache keep the two used
    last; an entry the round still uses is never evicted."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "_C.so").write_bytes(os.urandom(1 << 20))
    cache = BuildCache(tmp_path / "cache", limit=int(2.5 * (1 << 20)))
    for key in ("a", "b"):
        cache.store(key * 64, {"executor": "local"}, tree=tree, products=["_C.so"])
    for key, stamp in (("a", 100.0), ("b", 200.0)):
        os.utime(cache.root / (key * 64) / "used", (stamp, stamp))
    cache.lookup("a" * 64)  # used now: b is the least recently used
    cache.store("c" * 64, {"executor": "local"}, tree=tree, products=["_C.so"])
    assert sorted(e.key[0] for e in cache.entries()) == ["a", "c"]
    os.utime(cache.root / ("c" * 64) / "used", (300.0, 300.0))
    cache.store("d" * 64, {"executor": "local"}, tree=tree, products=["_C.so"], keep=["c" * 64])
    assert sorted(e.key[0] for e in cache.entries()) == ["c", "d"]
    head, *lines = cache.status_lines()
    assert "2 entries, 2.0 MiB of 2.5 MiB" in head[1] and len(lines) == 2


def test_two_campaigns_roots_on_one_daemon_never_evict_each_others_images(
    tmp_path: Path, cpu_image: str
) -> None:
    """Two campaigns roots built the same key on one Docker daemon: each cache's image
    is its own (``cache_tag`` names the cache folder), so one root removing its entry
    (an eviction, a damaged build) leaves the other's image in place.  Before, both were
    ``turbo-campaign-cache:<key>`` and the first removal deleted the other's."""
    from runner.executors.docker_args import cache_tag

    key = "e" * 64
    caches = [BuildCache(tmp_path / name / ".build-cache") for name in ("a", "b")]
    tags = [cache_tag(key, cache.root) for cache in caches]
    assert tags[0] != tags[1] and tags[0] == cache_tag(key, tmp_path / "a" / ".build-cache")

    def exists(tag: str) -> bool:
        inspect = ["docker", "image", "inspect", tag]
        return subprocess.run(inspect, capture_output=True, check=False).returncode == 0

    try:
        for cache, tag in zip(caches, tags, strict=True):
            subprocess.run(["docker", "tag", cpu_image, tag], check=True)
            cache.store(key, {"executor": "docker", "image": tag})
        caches[0].remove(key)
        assert not exists(tags[0])
        assert exists(tags[1]) and caches[1].lookup(key)[0] is not None
    finally:
        for tag in tags:
            subprocess.run(["docker", "image", "rm", "--force", tag], capture_output=True)
