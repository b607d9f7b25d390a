"""docs/reliability.md §7 row 14: no role can change what another role runs.

A candidate whose kernel module, when imported, finds the incumbent's worktree on the
local disk and makes its kernel do four times the work was ACCEPTED (+39%).  Now every
worker records the blob ids of the files it loaded (after the import and at the end of
its pass) and the host compares them, and the incumbent's whole tree, with what the
round started from (``runner.round.tamper_check``): the round FAILS as tampered, naming
the incumbent's file, before its first timed turn when the change came at import.
Where mount namespaces work, the local executor also makes every role's tree
read-only to every worker (``runner.executors.isolation``): the write fails.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from runner.core.errors import Tampered
from runner.core.outcomes import Status
from runner.executors.isolation import ISOLATION_ENV, isolated_argv, isolation_works
from runner.executors.local import LocalExecutor
from runner.round.tamper_check import BuildWatch, snapshot, tampering
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage

OPS = "turbo_kernels/pytorch/ops/gemm_fp8.py"
# Appended to the candidate's op module: at import, it finds its sibling worktree of the
# same campaign command (owner.json names the same pid) and appends a wrapper that makes
# the incumbent's forward GEMM run four times.
ATTACK = """

def _reach_the_incumbent() -> None:
    import json
    import sys
    from pathlib import Path

    rel = "turbo_kernels/pytorch/ops/gemm_fp8.py"
    mine = Path(__file__).resolve().parents[4]
    try:
        pid = json.loads((mine / "owner.json").read_text())["pid"]
        for other in mine.parent.iterdir():
            owner = other / "owner.json"
            target = other / "src" / rel
            if other == mine or not owner.is_file() or not target.is_file():
                continue
            if json.loads(owner.read_text()).get("pid") != pid:
                continue
            if "_slow_fp8_gemm" not in target.read_text():
                with target.open("a") as f:
                    f.write(
                        "\\n\\n_slow_fp8_gemm = _fp8_gemm\\n\\n\\n"
                        "def _fp8_gemm(*args, **kwargs):\\n"
                        "    for _ in range(3):\\n"
                        "        _slow_fp8_gemm(*args, **kwargs)\\n"
                        "    return _slow_fp8_gemm(*args, **kwargs)\\n"
                    )
                print(f"slowed {target}", file=sys.stderr)
    except OSError as exc:
        print(f"could not reach the incumbent: {exc}", file=sys.stderr)


_reach_the_incumbent()
"""


def _attack_patch(campaign: Campaign) -> str:
    lineage = Lineage(Path(campaign.manifest.source), campaign.name, None)
    with lineage.worktree(lineage.head()) as tree:
        with (tree / OPS).open("a", encoding="utf-8") as f:
            f.write(ATTACK)
        diff = subprocess.run(["git", "diff"], cwd=tree, capture_output=True, text=True, check=True)
    return diff.stdout


@pytest.mark.integration
def test_a_candidate_that_slows_the_incumbents_files_fails_as_tampered(
    demo_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.cli import main

    monkeypatch.setenv(ISOLATION_ENV, "off")  # the proof alone, as on a host without it
    camp = Campaign.load(demo_copy)
    lineage = Lineage(Path(camp.manifest.source), camp.name, None)
    head = lineage.head()
    patch_file = tmp_path / "attack.patch"
    patch_file.write_text(_attack_patch(camp), encoding="utf-8")
    n = camp.next_round()
    argv = [
        "--campaigns-root",
        str(demo_copy.parent),
        "validate",
        "--round",
        str(n),
        "--hypothesis",
        "h",
        "--patch",
        str(patch_file),
        "--pairs",
        "1",
    ]
    with pytest.raises(SystemExit) as info:
        main(argv)
    result = Campaign.load(demo_copy).load_result(n)
    reasons = "\n".join(result.reasons)
    assert result.status is Status.FAILED, reasons
    assert info.value.code == 6
    assert "TAMPERED" in reasons and "incumbent" in reasons and OPS in reasons, reasons
    assert "found before the first timed turn" in reasons  # nothing was measured for it
    assert result.key_finding.startswith("TAMPERED")
    assert lineage.head() == head


@pytest.mark.integration
def test_final_acceptance_proves_each_role_ran_its_own_files(
    demo_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``campaign accept`` (and ``campaign reproduce``) judge through the rounds'
    proof: a final best whose import rewrites the base commit's tree is caught before
    the first timed turn of the full validation, and acceptance stops as TAMPERED."""
    from runner.compare.shapes import level_shapes
    from runner.flow.accept import full_validation
    from runner.round.build import built_roles
    from runner.round.context import RoundPlan
    from runner.store.leftovers import job_dir

    monkeypatch.setenv(ISOLATION_ENV, "off")  # the proof alone
    camp = Campaign.load(demo_copy)
    lineage = Lineage(Path(camp.manifest.source), camp.name, None)
    shapes = level_shapes(camp.manifest, "quick")
    with (
        job_dir(camp.root, camp.name) as tmp,
        lineage.worktree(str(camp.manifest.base_commit)) as base,
        lineage.worktree(lineage.head(), _attack_patch(camp)) as final,
    ):
        rnd = RoundPlan(camp, LocalExecutor(), lambda m: None, tmp, 0, "full")
        trees = {"baseline": base, "final": final}
        with built_roles(rnd, trees) as built, pytest.raises(Tampered) as info:
            full_validation(built.plan, trees, shapes, 1)
    text = str(info.value)
    assert "the baseline's tree" in text and OPS in text, text
    assert info.value.guard == "tamper check" and info.value.problems, info.value.problems
    assert "found before the first timed turn" in text


def _repo(path: Path) -> Path:
    path.mkdir()
    (path / "k.py").write_text("x = 1\n")
    (path / ".gitignore").write_text("build/\n")
    for args in (
        ["init", "-q"],
        ["add", "-A"],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "k"],
    ):
        subprocess.run(["git", *args], cwd=path, check=True)
    return path


def test_a_changed_loaded_file_and_a_new_file_are_named(tmp_path: Path) -> None:
    import json

    inc = _repo(tmp_path / "inc")
    (inc / "build").mkdir()
    (inc / "build" / "k.so").write_bytes(b"\x7fELF")
    before = snapshot({"incumbent": inc})
    out = tmp_path / "tmp" / "pass-01-incumbent"
    out.mkdir(parents=True)
    for name in ("worker.log", "benchmark.csv"):
        (out / name).write_text("")
    good = before["incumbent"].files["k.py"]
    record = {"role": "incumbent", "load": {"k.py": good}, "end": {"k.py": good}}
    (out / "loaded.json").write_text(json.dumps(record))
    assert tampering(before, tmp_path / "tmp") == []
    (inc / "build" / "k.so").write_bytes(b"\x7fELF slow")
    (inc / "sitecustomize.py").write_text("import os\n")
    record["end"] = {"k.py": "0" * 40}
    (out / "loaded.json").write_text(json.dumps(record))
    problems = "\n".join(tampering(before, tmp_path / "tmp"))
    assert "pass-01-incumbent (incumbent) loaded k.py, not the incumbent's" in problems
    assert "at the end of its pass blob 000000000000" in problems and "at import" not in problems
    assert "build/k.so, sitecustomize.py" in problems
    harness = before["harness"]  # the runner package: a local worker's own harness
    assert "worker/bench/timing.py" in harness.files
    record |= {
        "harness_root": str(harness.tree),
        "harness_end": {"worker/bench/timing.py": "1" * 40},
    }
    (out / "loaded.json").write_text(json.dumps(record))
    problems = "\n".join(tampering(before, tmp_path / "tmp"))
    assert "loaded harness file worker/bench/timing.py, not the harness's" in problems
    record["harness_root"] = "/opt/image/runner"  # a container's harness: its image's own
    (out / "loaded.json").write_text(json.dumps(record))
    assert "harness file" not in "\n".join(tampering(before, tmp_path / "tmp"))
    (out / "loaded.json").unlink()
    assert "without a record of the files it loaded" in "\n".join(
        tampering(before, tmp_path / "tmp", guarded=())
    )


def test_the_worker_s_record_of_what_it_loaded_reads_back_as_written(tmp_path: Path) -> None:
    """``record_loaded`` (the worker's, run for both phases in a fresh interpreter, as a
    worker runs it: this test process holds every module the suite imported, the
    checkout's .venv among them) writes one flat JSON object; the host reads it as a
    ``LoadedRecord`` with the same files, and what it writes back is the same object."""
    import json
    import sys

    import runner
    from runner.core.loaded_record import LoadedRecord, read_loaded
    from runner.core.spec import SOURCE_ENV

    tree = Path(runner.__file__).resolve().parent.parent  # the worker loads from it
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from runner.worker.bench.provenance import record_loaded\n"
        "out = Path(sys.argv[1])\n"
        "record_loaded(out, 'candidate', 'load')\n"
        "record_loaded(out, 'incumbent', 'end')  # the first phase's role stays\n"
    )
    env = {**os.environ, SOURCE_ENV: str(tree), "PYTHONPATH": str(tree)}
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], env=env, check=True)
    doc = json.loads((tmp_path / "loaded.json").read_text(encoding="utf-8"))
    assert set(doc) == {"role", "harness_root", "load", "end", "harness_load", "harness_end"}
    got = read_loaded(tmp_path)
    assert got is not None and got.role == "candidate" and got.to_dict() == doc
    assert "runner/worker/bench/provenance.py" in got.loaded("end")
    assert "runner/core/loaded_record.py" in got.loaded("end")
    assert "core/loaded_record.py" in got.loaded("end", harness=True)
    assert LoadedRecord.from_dict({"load": {}}) is None  # no role: not a record
    (tmp_path / "loaded.json").write_text("[1, 2]", encoding="utf-8")
    assert read_loaded(tmp_path) is None


def test_a_build_may_add_products_but_not_rewrite_another_roles_files(tmp_path: Path) -> None:
    """Between the points a ``BuildWatch`` looks (before any build, before and after
    each role's own build) only other roles' builds run: a role's own products pass, a
    later build that rewrites an earlier role's product or file fails the round, and so
    does a tree changed before its own build (any number of roles: a tournament)."""
    trees = {r: _repo(tmp_path / r) for r in ("incumbent", "candidate-1", "candidate-2")}

    def build_all(attack: str = "") -> None:
        watch = BuildWatch(trees)
        for role, tree in trees.items():
            watch.before(role)
            (tree / "build").mkdir(exist_ok=True)
            (tree / "build" / "k.so").write_bytes(b"\x7fELF " + role.encode())  # its own
            if role == attack:  # its setup.py writes the others' trees
                (trees["incumbent"] / "build" / "k.so").write_bytes(b"\x7fELF planted")
                (trees["incumbent"] / "k.py").write_text("x = 2\n")
                (trees["candidate-2"] / "k.py").write_text("x = 3\n")
            watch.after(role)
        watch.finish()

    build_all()  # each role's own products only: nothing to say
    with pytest.raises(Tampered) as info:
        build_all(attack="candidate-1")
    text = str(info.value)
    assert f"the incumbent's tree {trees['incumbent']} changed after its own build" in text
    assert "build ran: build/k.so, k.py" in text
    assert "candidate-2's tree" in text and "changed before its own build" in text
    assert "candidate-1's tree" not in text


@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_an_isolated_process_cannot_write_the_other_trees(tmp_path: Path) -> None:
    other, own = tmp_path / "other", tmp_path / "tmp" / "own"
    other.mkdir()
    own.mkdir(parents=True)
    (other / "k.py").write_text("x = 1\n")
    script = f"echo slow >> {other / 'k.py'}; echo $? > {own / 'rc'}; echo ok > {own / 'out'}"
    argv = isolated_argv(["sh", "-c", script], readonly=[other, tmp_path / "tmp"], writable=[own])
    subprocess.run(argv, check=True)
    assert (other / "k.py").read_text() == "x = 1\n"
    assert (own / "rc").read_text().strip() != "0"
    assert (own / "out").read_text() == "ok\n"
    # unprotected (as with TURBO_CAMPAIGN_ISOLATION=off) the same write lands
    subprocess.run(["sh", "-c", script], check=True)
    assert "slow" in (other / "k.py").read_text()


@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_a_local_job_cannot_write_what_the_round_protects(
    demo_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round's jobs carry the other role's tree, the scratch folder, the campaign
    folder, the source and the harness as read-only paths, and the local executor runs
    the job's processes (here its preparation command) with them read-only."""
    import runner
    from runner.executors.base import WorkerJob
    from runner.executors.local import LocalExecutor
    from runner.round.context import RoundPlan

    camp = Campaign.load(demo_copy)
    inc, cand, tmp = tmp_path / "wt-inc" / "src", tmp_path / "wt-cand" / "src", tmp_path / "job"
    for d in (inc, cand, tmp):
        d.mkdir(parents=True)
    rnd = RoundPlan(camp, LocalExecutor(), lambda m: None, tmp, camp.next_round(), "quick")
    rnd = rnd.guarding({"incumbent": inc, "candidate": cand})
    assert rnd.role_dirs == (inc.parent, cand.parent)
    readonly = rnd.readonly(cand)
    assert inc.parent in readonly and cand.parent not in readonly and cand not in readonly
    assert {tmp, camp.root, Path(camp.manifest.source)} <= set(readonly)
    assert Path(runner.__file__).resolve().parent in readonly
    (inc / "k.py").write_text("x = 1\n")
    write = ("sh", "-c", f"echo mine > own.txt && echo slow >> {inc / 'k.py'}")
    job = WorkerJob(
        "pass-02-candidate",
        tmp / "spec.json",
        cand,
        tmp / "pass-02-candidate",
        prepare=(write,),
        readonly=readonly,
    )
    outcome = LocalExecutor().run_job(job)
    assert outcome.returncode != 0
    assert "Read-only file system" in outcome.log_path.read_text()
    assert (inc / "k.py").read_text() == "x = 1\n" and (cand / "own.txt").is_file()
    monkeypatch.setenv(ISOLATION_ENV, "off")
    assert LocalExecutor().run_job(job).returncode != 0  # the worker itself has no spec
    assert "slow" in (inc / "k.py").read_text()


@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_each_role_has_its_own_jit_cache_that_no_other_role_can_write(
    demo_copy: Path, tmp_path: Path
) -> None:
    """A local job's Triton, Inductor and CUDA caches are its role's own folder, keyed
    by role and tree content (the same tree next round finds it again); every other
    role's folder is read-only to it, so a candidate cannot plant a kernel that the
    incumbent then loads."""
    from dataclasses import replace

    from runner.round.context import RoundPlan

    camp = Campaign.load(demo_copy)
    for role in ("inc", "cand"):
        (tmp_path / f"wt-{role}").mkdir()
    inc, cand = _repo(tmp_path / "wt-inc" / "src"), _repo(tmp_path / "wt-cand" / "src")
    (cand / "k2.py").write_text("y = 2\n")  # the candidate's change
    tmp = tmp_path / "job"
    tmp.mkdir()
    rnd = RoundPlan(camp, LocalExecutor(), lambda m: None, tmp, 0, "quick")
    rnd = rnd.guarding({"incumbent": inc, "candidate": cand})
    assert rnd.role_dirs == (inc.parent, cand.parent)
    mine, theirs = rnd.jit_folder("candidate", cand), rnd.jit_folder("incumbent", inc)
    assert mine != theirs and mine.parent == theirs.parent == demo_copy.parent / ".jit-cache"
    again = RoundPlan(camp, LocalExecutor(), lambda m: None, tmp, 0, "quick")
    assert again.jit_folder("incumbent", inc) == theirs  # the same tree: its compiled kernels
    assert again.jit_folder("candidate", inc) != theirs  # never another role's folder
    plant = (
        f'echo "$TRITON_CACHE_DIR $TORCHINDUCTOR_CACHE_DIR $TRITON_CACHE_AUTOTUNING" > env.txt && '
        f'mkdir -p "$TRITON_CACHE_DIR" && echo k > "$TRITON_CACHE_DIR/mine" && '
        f"mkdir -p {theirs}/triton && echo planted > {theirs}/triton/k"
    )
    job = rnd.worker_job("pass-02-candidate", rnd.template.for_pass("candidate", 2, []), cand)
    outcome = LocalExecutor().run_job(replace(job, prepare=(("sh", "-c", plant),)))
    assert outcome.returncode != 0
    assert "Read-only file system" in outcome.log_path.read_text()
    # its autotune results kept in its own folder too (the switch is Triton's)
    assert (cand / "env.txt").read_text().split() == [
        str(mine / "triton"),
        str(mine / "inductor"),
        "1",
    ]
    assert (mine / "triton" / "mine").is_file() and not (theirs / "triton" / "k").exists()


def test_a_module_planted_ahead_of_site_packages_is_named_by_the_proof(tmp_path: Path) -> None:
    """Where a host cannot isolate, a ``torch.py`` (or a changed module, or a new
    package) in a folder every worker imports from before its own paths and
    site-packages (the harness root, the standard library) fails the round's proof."""
    from dataclasses import replace

    from runner.core.startup import importable_files
    from runner.round.tamper_check import shadow_changes, startup_state

    root = tmp_path / "harness-root"
    (root / "runner").mkdir(parents=True)
    (root / "runner" / "__init__.py").write_text("")
    (root / "notes.txt").write_text("not importable\n")
    state = startup_state([], dirs=[])
    assert Path(__import__("runner").__file__).resolve().parent.parent in state.shadowing
    state = replace(state, shadowing=(root,), importable=importable_files([root]))
    assert shadow_changes(state) == []
    (root / "notes.txt").write_text("still not importable\n")
    assert shadow_changes(state) == []
    (root / "torch.py").write_text("slow = True\n")
    (root / "runner" / "__init__.py").write_text("x = 1\n")
    found = shadow_changes(state)
    assert [f.split(" was ")[0] for f in found] == [
        f"importable file {root / 'runner' / '__init__.py'}",
        f"importable file {root / 'torch.py'}",
    ]
    assert all(f.endswith("(harness proof: module shadow)") for f in found)


@pytest.mark.skipif(not isolation_works(), reason="no mount namespaces on this host")
def test_a_job_cannot_write_the_harness_root_or_the_prefix(tmp_path: Path) -> None:
    """The harness root (first on every worker's ``sys.path``) and the interpreter's
    prefix are read-only to a local job that carries them (``RoundPlan.readonly`` with
    ``interpreter``, every worker job's; the red-team round shows the wiring)."""
    import sys

    from runner.executors.base import WorkerJob
    from runner.executors.isolation import interpreter_roots

    roots = interpreter_roots()
    assert Path(sys.prefix).resolve() in roots
    shadow = roots[0] / "torch.py"
    assert roots[0] / "runner" == Path(__import__("runner").__file__).resolve().parent
    assert not shadow.exists()
    own = tmp_path / "src"
    own.mkdir()
    plant = ("sh", "-c", f"echo 'slow = True' > {shadow} || echo refused > seen.txt")
    job = WorkerJob(
        "pass-02-candidate",
        tmp_path / "spec.json",
        own,
        tmp_path / "out",
        prepare=(plant,),
        readonly=roots,
    )
    try:
        outcome = LocalExecutor().run_job(job)
    finally:
        planted = shadow.exists()
        shadow.unlink(missing_ok=True)
    assert not planted and (own / "seen.txt").read_text() == "refused\n"
    assert "Read-only file system" in outcome.log_path.read_text()
