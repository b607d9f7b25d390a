"""The Slurm executor: exact sbatch argv and scripts (pure), outcome rules, and real
jobs on the one-node cluster that ``scripts/slurm-setup.sh`` starts (marked slurm).

The real tests skip only when ``sinfo`` fails and CI is unset; under CI they try the
setup script once and fail when the cluster still does not answer.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from runner.core import processes as cmd
from runner.core.errors import ConfigError, InfrastructureError
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, save_spec
from runner.core.startup import isolated_python
from runner.executors import slurm_scripts
from runner.executors.base import WorkerJob
from runner.executors.container import containment_args, safe_name
from runner.executors.isolation import ISOLATION_ENV
from runner.executors.slurm import LOST_RC, NO_CSV_RC, STATE_RC, SlurmExecutor, task_returncode
from runner.executors.slurm_parse import (
    all_final,
    parse_job_id,
    parse_scontrol,
    state_by_task,
)
from runner.executors.slurm_scripts import (
    SlurmSettings,
    array_script,
    docker_run_line,
    sbatch_args,
    task_script,
)

ROOT = Path(__file__).resolve().parent.parent


# ---- pure ----------------------------------------------------------------------------
def test_sbatch_args_exact() -> None:
    settings = SlurmSettings(partition="mi300", account="perf", gres="gpu:1", extra_args=("-N1",))
    args = sbatch_args(
        Path("/s/t.sh"), job_name="tc-x", output="/o/slurm-%j.out", settings=settings
    )
    assert args == [
        "sbatch",
        "--parsable",
        "--job-name=tc-x",
        "--output=/o/slurm-%j.out",
        "--export=NONE",
        "--ntasks=1",
        "--time=00:30:00",
        "--partition=mi300",
        "--account=perf",
        "--gres=gpu:1",
        "-N1",
        "/s/t.sh",
    ]


def test_sbatch_args_array_and_timeout() -> None:
    settings = SlurmSettings(array_limit=2)
    args = sbatch_args(
        Path("a.sh"), job_name="n", output="o", settings=settings, timeout_s=61, array_size=4
    )
    assert args == [
        "sbatch",
        "--parsable",
        "--job-name=n",
        "--output=o",
        "--export=NONE",
        "--ntasks=1",
        "--time=2",
        "--array=0-3%2",
        "a.sh",
    ]


def _job(tmp: Path, **kw: object) -> WorkerJob:
    fields: dict[str, object] = {
        "name": "pass-01-candidate",
        "spec_path": tmp / "spec.json",
        "source_dir": tmp / "tree",
        "out_dir": tmp / "out dir",
        "env": {"PYTHONPATH": str(tmp / "tree"), "SEL": "TORCH"},
    }
    fields.update(kw)
    return WorkerJob(**fields)  # type: ignore[arg-type]


def test_task_script_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(slurm_scripts, "clean_env", lambda job: {"PATH": "/bin", **job.env})
    job = _job(Path("/shared/r"), prepare=(("pip", "install", "-e", "."),))
    text = task_script(job, python="/venv/bin/python")
    worker = shlex.join(
        isolated_python(
            "/venv/bin/python", "runner.worker", ["/shared/r/spec.json", "/shared/r/out dir"]
        )
    )
    lines = text.replace(worker, "WORKER").splitlines()  # started isolated: BOOT's lines
    assert lines[0] == "#!/bin/bash"
    assert "out='/shared/r/out dir'" in lines
    assert 'exec >"$out/job.log" 2>&1' in lines
    assert lines[lines.index("cd /shared/r/tree || finish 1") + 1 :] == [
        "export PATH=/bin",
        "export PYTHONPATH=/shared/r/tree",
        "export SEL=TORCH",
        "iso=()",  # nothing to protect: no namespace (test_real_task_runs_in_its_namespace)
        "echo '$ ''pip install -e .'",
        '"${iso[@]}" pip install -e . || finish "$?"',
        "echo '$ ''/venv/bin/python -m runner.worker /shared/r/spec.json "
        "'\"'\"'/shared/r/out dir'\"'\"''",
        '"${iso[@]}" WORKER',
        'finish "$?"',
    ]


def test_build_task_script_builds_the_tree_in_place_in_the_image(tmp_path: Path) -> None:
    """A role's build in an image: one container, the tree the only host path mounted
    (writable, where the jobs later mount it read-only), python/pip the image's,
    confined as a job's container is, its own log and exit record."""
    from runner.executors.base import BuildJob
    from runner.executors.build_cache import BuildCache

    tree = tmp_path / "tree"
    tree.mkdir()
    build = BuildJob(
        role="candidate",
        round=3,
        source_dir=tree,
        out_dir=tmp_path / "b",
        key="k",
        cache=BuildCache(tmp_path / "cache"),
        env={"GPU_ARCHS": "gfx942"},
        commands=(("python", "setup.py", "build_ext", "--inplace"), ("pip", "list")),
    )
    line = slurm_scripts.build_run_line(build, "img:1")
    argv = shlex.split(line.replace('"$(id -u):$(id -g)"', "U").replace('"tc-build-', '"tc-b-'))
    assert argv[:3] == ["docker", "run", "--rm"] and argv[-4:-2] == ["img:1", "sh"]
    mounts = [argv[i + 1] for i, a in enumerate(argv) if a == "--mount"]
    assert mounts == [f"type=bind,source={tree.resolve()},target=/workspace/target"]
    assert argv[argv.index("--user") + 1] == "U" and argv[argv.index("--workdir") + 1] == (
        "/workspace/target"
    )
    for flag in ("--network", "--cap-drop", "--pull", "--pids-limit", "--memory"):
        assert flag in argv
    assert "GPU_ARCHS=gfx942" in argv and "HOME=/tmp" in argv
    assert argv[-1] == "set -e\npython3 setup.py build_ext --inplace\npython3 -m pip list"
    script = slurm_scripts.build_task_script(build, "img:1")
    assert f'\nexec >"$out/{slurm_scripts.BUILD_TASK_LOG}" 2>&1\n' in script
    assert script.endswith(f'\n{line} &\nwait "$!"\nfinish "$?"\n')


def test_task_env_drops_the_submitters_gpu_visibility(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "3")
    env = slurm_scripts.task_env(_job(Path("/s"), env={"HIP_VISIBLE_DEVICES": "0"}))
    assert "CUDA_VISIBLE_DEVICES" not in env and "ROCR_VISIBLE_DEVICES" not in env
    assert env["HIP_VISIBLE_DEVICES"] == "0" and env["TURBO_CAMPAIGN_SOURCE"] == "/s/tree"


def test_docker_run_line_mounts_read_only_and_translates_paths() -> None:
    line = docker_run_line(_job(Path("/s")), "turbo-campaign/rocm:1", "amd")
    assert line.startswith('docker run --rm --name "tc-${SLURM_JOB_ID:-0}-$$" --device /dev/kfd')
    # the docker executor's container (runner.executors.container): same confinement
    confine, _ = containment_args(_job(Path("/s")), None, "mount")
    assert shlex.join(confine) in line
    assert "--mount type=bind,source=/s/tree,target=/workspace/target,readonly" in line
    assert "--mount type=bind,source=/s/spec.json,target=/workspace/spec.json,readonly" in line
    assert "'type=bind,source=/s/out dir,target=/out'" in line
    assert "--read-only" in line and "--cap-drop ALL" in line
    assert "-e PYTHONPATH=/workspace/target" in line
    assert "-e TURBO_CAMPAIGN_SOURCE=/workspace/target" in line
    assert "--network none" in line and "--pull never" in line
    # an unprivileged user opens the AMD nodes through the node's video/render groups
    assert 'getent group "$g"' in line and "--group-add" in line
    assert line.endswith(
        "turbo-campaign/rocm:1 sh -c 'set -e\nmkdir -p /workspace/target\n"
        "exec python3 -m runner.worker /workspace/spec.json /out'"
    )


def test_docker_run_line_copies_the_tree_when_prepare_writes() -> None:
    job = _job(Path("/s"), prepare=(("make",),))
    line = docker_run_line(job, "img")
    assert "--mount type=bind,source=/s/tree,target=/workspace/src,readonly" in line
    assert "--read-only" not in line  # the copy is written inside the container
    assert "cp -a /workspace/src/. /workspace/target/ && cd /workspace/target\nmake\n" in line


def test_array_script_picks_its_line() -> None:
    text = array_script(Path("/s/m.manifest"))
    assert 'line=$(sed -n "$((SLURM_ARRAY_TASK_ID + 1))p" /s/m.manifest)' in text
    assert "IFS=$'\\t' read -r -a tasks <<<\"$line\"" in text
    assert text.rstrip().endswith('for task in "${tasks[@]}"; do /bin/bash "$task"; done')


@pytest.mark.parametrize(
    ("exit_text", "state", "has_csv", "needs_csv", "want"),
    [
        ("0\n", "COMPLETED", True, True, 0),
        ("0\n", None, True, True, 0),  # scontrol forgot the job: the exit record decides
        ("3\n", "FAILED", False, True, 3),
        (None, "CANCELLED", False, True, LOST_RC),  # killed before it wrote a record
        (None, None, True, True, LOST_RC),
        ("0\n", "CANCELLED by 0", True, True, STATE_RC),
        ("0\n", "TIMEOUT", True, True, STATE_RC),
        ("0\n", "NODE_FAIL", True, True, STATE_RC),
        ("143\n", "CANCELLED", False, True, 143),
        ("0\n", "COMPLETED", False, True, NO_CSV_RC),  # a partial CSV is never gated
        ("0\n", "COMPLETED", False, False, 0),  # a test-mode job writes no CSV
        ("garbage", "COMPLETED", True, True, LOST_RC),
    ],
)
def test_task_returncode(
    exit_text: str | None, state: str | None, has_csv: bool, needs_csv: bool, want: int
) -> None:
    assert task_returncode(exit_text, state, has_csv, needs_csv) == want


def test_parsers() -> None:
    assert parse_job_id("sbatch: warning: x\n1234\n") == "1234"
    assert parse_job_id("77;cluster\n") == "77"
    assert parse_job_id("sbatch: error: invalid partition\n") is None
    text = (
        "JobId=3 ArrayJobId=2 ArrayTaskId=0 JobName=a JobState=COMPLETED ExitCode=0:0\n"
        "JobId=2 ArrayJobId=2 ArrayTaskId=1 JobName=a JobState=FAILED ExitCode=1:0\n"
    )
    jobs = parse_scontrol(text)
    assert state_by_task(jobs) == {"0": "COMPLETED", "1": "FAILED"}
    assert state_by_task(parse_scontrol("JobId=9 JobState=CANCELLED Reason=x\n")) == {
        None: "CANCELLED"
    }
    assert safe_name("pass-01/cand idate") == "pass-01-cand-idate"


def test_shared_root_is_checked(tmp_path: Path) -> None:
    executor = SlurmExecutor(shared_root=tmp_path / "shared")
    with pytest.raises(ConfigError, match="not under the shared filesystem"):
        executor.run_job(_job(tmp_path))


def test_ctrl_c_cancels_the_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[0] == "sbatch":
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(argv, 0, "")

    monkeypatch.setattr(cmd, "run", fake_run)
    with pytest.raises(KeyboardInterrupt):
        SlurmExecutor().run_job(_job(tmp_path))
    job_name = next(a for a in calls[0] if a.startswith("--job-name="))
    assert calls[1] == ["scancel", "--name=" + job_name.split("=", 1)[1]]


def test_ctrl_c_while_waiting_cancels_by_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        calls.append(list(argv))
        if argv[0] == "scontrol":
            raise KeyboardInterrupt
        return subprocess.CompletedProcess(argv, 0, "42\n")

    monkeypatch.setattr(cmd, "run", fake_run)
    with pytest.raises(KeyboardInterrupt):
        SlurmExecutor().run_job(_job(tmp_path))
    assert calls[1] == ["scontrol", "show", "job", "-o", "42"]
    assert calls[2] == ["scancel", "42"]


def test_polls_until_final_and_survives_a_purged_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    replies = iter(
        [
            (0, "JobId=7 JobState=PENDING Reason=None"),
            (0, "JobId=7 JobState=RUNNING Reason=None"),
            (0, "JobId=7 JobState=COMPLETING Reason=None"),
            (1, "slurm_load_jobs error: Invalid job id specified"),
        ]
    )

    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if argv[0] == "sbatch":
            return subprocess.CompletedProcess(argv, 0, "7\n")
        rc, out = next(replies)
        return subprocess.CompletedProcess(argv, rc, out)

    monkeypatch.setattr(cmd, "run", fake_run)
    job = _job(tmp_path)
    outcome = SlurmExecutor(poll_s=0).run_job(job)
    assert outcome.returncode == LOST_RC  # the task never wrote its exit record
    record = json.loads((job.out_dir / "slurm.json").read_text())
    assert record["submitted_job_id"] == "7" and record["state"] is None


def test_all_final() -> None:
    assert all_final({None: "COMPLETED"}) and all_final({"0": "FAILED", "1": "CANCELLED by 0"})
    assert not all_final({"0": "COMPLETED", "1": "RUNNING"}) and not all_final({})
    assert not all_final({None: "COMPLETING"})


def test_failed_submission_is_an_infrastructure_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fake_run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, "sbatch: error: invalid partition")

    monkeypatch.setattr(cmd, "run", fake_run)
    with pytest.raises(InfrastructureError, match="invalid partition"):
        SlurmExecutor(partition="nope").run_job(_job(tmp_path))


# ---- real jobs on the one-node cluster -----------------------------------------------
def _sinfo_ok() -> bool:
    if shutil.which("sinfo") is None:
        return False
    proc = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, check=False)
    return proc.returncode == 0 and bool(proc.stdout.strip())


@pytest.fixture(scope="session")
def cluster() -> None:
    if _sinfo_ok():
        return
    if not os.environ.get("CI"):
        pytest.skip("no Slurm cluster (sinfo missing or failing); run scripts/slurm-setup.sh")
    setup = subprocess.run(
        ["bash", str(ROOT / "scripts" / "slurm-setup.sh")], capture_output=True, text=True
    )
    assert setup.returncode == 0 and _sinfo_ok(), (
        "CI is set but Slurm does not answer after scripts/slurm-setup.sh:\n"
        + setup.stdout
        + setup.stderr
    )


def _worker_job(tmp: Path, name: str, shape: Shape, **kw: object) -> WorkerJob:
    tree = tmp / "tree"
    if not tree.exists():
        import runner.cli  # noqa: F401  (newcampaign imported first hits an import cycle)
        from runner.flow.new_campaign import fresh_example_copy

        fresh_example_copy(tree)
    spec = RoundSpec(
        campaign="slurm-test",
        round=1,
        role="baseline",
        pass_index=1,
        level="full",
        target="example",
        op="gemm",
        options={"backend": "TORCH", "granularity": None},
        shapes=(shape,),
        device="cpu",
        timing=TimingSettings(
            warmup_s=0.01, repeats=2, max_repeats=3, budget_s=0.05, batch_s=0.005
        ),
    )
    save_spec(tmp / "specs" / f"{name}.json", spec)
    env = {"PYTHONPATH": str(tree), "TURBO_KERNELS_GEMM_BACKEND": "TORCH"}
    fields: dict[str, object] = {"env": env, "timeout_s": 600, **kw}
    return WorkerJob(name, tmp / "specs" / f"{name}.json", tree, tmp / name, **fields)  # type: ignore[arg-type]


TINY = Shape("tiny", 16, 64, 64)


@pytest.mark.slurm
def test_real_worker_job(cluster: None, tmp_path: Path) -> None:
    job = _worker_job(tmp_path, "pass-01-baseline", TINY)
    outcome = SlurmExecutor(shared_root=tmp_path).run_job(job)
    assert outcome.ok, outcome.log_path.read_text()
    rows = (job.out_dir / "benchmark.csv").read_text().splitlines()
    assert rows[1].startswith("tiny,1,16,64,64,PASS")
    record = json.loads((job.out_dir / "slurm.json").read_text())
    assert record["node"] == "localhost" and record["job_id"] == record["submitted_job_id"]
    assert record["state"] == "COMPLETED" and record["returncode"] == 0
    assert (job.out_dir / "slurm-task.sh").is_file()


@pytest.mark.slurm
def test_real_task_runs_in_its_namespace(
    cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A native task runs as a local job does: the paths the round protects (here
    another role's tree) are read-only to its processes, its out folder and its role's
    JIT cache folder writable; the worker still measures.  Off, the write lands."""
    from dataclasses import replace

    other, jit = tmp_path / "other-role", tmp_path / "jit" / "candidate-0123"
    other.mkdir()
    (other / "k.py").write_text("x = 1\n")
    write = (
        "sh",
        "-c",
        f"echo mine > $TRITON_CACHE_DIR.txt; echo slow >> {other / 'k.py'}; echo rc=$? > own.txt",
    )
    job = _worker_job(
        tmp_path,
        "pass-01-candidate",
        TINY,
        prepare=(write,),
        readonly=(other, tmp_path / "jit"),
        jit_cache=jit,
    )
    outcome = SlurmExecutor(shared_root=tmp_path).run_job(job)
    assert outcome.ok, outcome.log_path.read_text()
    assert "Read-only file system" in outcome.log_path.read_text()
    assert (other / "k.py").read_text() == "x = 1\n"
    assert (job.source_dir / "own.txt").read_text().strip() != "rc=0"
    assert (jit / "triton.txt").read_text() == "mine\n"  # its own JIT folder: writable
    monkeypatch.setenv(ISOLATION_ENV, "off")
    again = replace(job, out_dir=tmp_path / "again", prepare=(write, ("false",)))  # no worker
    assert SlurmExecutor(shared_root=tmp_path).run_job(again).returncode == 1
    assert "slow" in (other / "k.py").read_text()


@pytest.mark.slurm
def test_real_array_of_two_shards(cluster: None, tmp_path: Path) -> None:
    jobs = [
        _worker_job(tmp_path, "pass-01-incumbent-gpu0", TINY),
        _worker_job(tmp_path, "pass-01-incumbent-gpu1", Shape("small", 32, 64, 64)),
    ]
    outcomes = SlurmExecutor().submit_array(jobs)
    assert [o.name for o in outcomes] == [j.name for j in jobs]
    for i, (job, outcome) in enumerate(zip(jobs, outcomes, strict=True)):
        assert outcome.ok, outcome.log_path.read_text()
        record = json.loads((job.out_dir / "slurm.json").read_text())
        assert record["array_task_id"] == str(i) and record["node"] == "localhost"
        assert record["array_job_id"] == record["submitted_job_id"]
    labels = [(j.out_dir / "benchmark.csv").read_text().splitlines()[1][:5] for j in jobs]
    assert labels == ["tiny,", "small"]


@pytest.mark.slurm
def test_real_sequences_keep_a_shards_passes_in_one_task(cluster: None, tmp_path: Path) -> None:
    """Shard 0 runs two passes in order in one array task; a failure stops its shard."""
    first = _worker_job(tmp_path, "pass-01-incumbent-gpu0", TINY)
    second = _worker_job(tmp_path, "pass-02-candidate-gpu0", TINY)
    bad = _worker_job(tmp_path, "pass-01-incumbent-gpu1", TINY, prepare=(("false",),))
    never = _worker_job(tmp_path, "pass-02-candidate-gpu1", TINY)
    (a, b), (c, d) = SlurmExecutor().submit_sequences([[first, second], [bad, never]])
    assert a.ok and b.ok
    ids = [json.loads((j.out_dir / "slurm.json").read_text())["job_id"] for j in (first, second)]
    assert ids[0] == ids[1]  # the same Slurm task (one allocation) ran both passes
    t0 = json.loads((first.out_dir / "slurm.json").read_text())["started"]
    t1 = json.loads((second.out_dir / "slurm.json").read_text())["started"]
    assert t0 <= t1
    assert c.returncode == 1 and d.returncode == LOST_RC


@pytest.mark.slurm
def test_real_failing_task(cluster: None, tmp_path: Path) -> None:
    job = _worker_job(tmp_path, "fails", TINY, prepare=(("sh", "-c", "echo broken; exit 3"),))
    outcome = SlurmExecutor().run_job(job)
    assert outcome.returncode == 3 and not outcome.ok
    assert "broken" in outcome.log_path.read_text()
    assert json.loads((job.out_dir / "slurm.json").read_text())["state"] == "FAILED"


@pytest.mark.slurm
def test_real_array_with_one_failing_shard(cluster: None, tmp_path: Path) -> None:
    jobs = [
        _worker_job(tmp_path, "ok", TINY),
        _worker_job(tmp_path, "bad", TINY, prepare=(("false",),)),
    ]
    ok, bad = SlurmExecutor().submit_array(jobs)
    assert ok.ok and ok.returncode == 0
    assert bad.returncode == 1 and not bad.ok


@pytest.mark.slurm
def test_real_cancelled_job(cluster: None, tmp_path: Path) -> None:
    job = _worker_job(tmp_path, "cancelled", TINY, prepare=(("sleep", "120"),))
    result: list[object] = []
    thread = threading.Thread(target=lambda: result.append(SlurmExecutor().run_job(job)))
    thread.start()
    record = job.out_dir / "slurm.json"
    deadline = time.monotonic() + 60
    while not record.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    job_id = json.loads(record.read_text())["job_id"]
    subprocess.run(["scancel", job_id], check=True)
    thread.join(timeout=60)
    assert not thread.is_alive()
    (outcome,) = result
    assert outcome.returncode != 0 and not outcome.ok  # type: ignore[attr-defined]
    assert json.loads(record.read_text())["state"].startswith("CANCELLED")


def test_python_is_this_interpreter_by_default() -> None:
    assert SlurmExecutor().python == sys.executable


def test_the_manifest_selects_the_slurm_executor() -> None:
    from runner.executors.factory import make_executor
    from runner.executors.slurm import SlurmExecutor
    from runner.flow.new_campaign import build_manifest

    m = build_manifest(
        target_op="gemm",
        target_backend="TORCH",
        source="/s",
        test_command="t",
        benchmark_command="b",
        executor="slurm",
        image="img:1",
    )
    executor = make_executor(m)
    assert isinstance(executor, SlurmExecutor)
    assert executor.image == "img:1"


@pytest.mark.slurm
@pytest.mark.docker
def test_real_image_task_runs_in_the_docker_executors_container(
    cluster: None, cpu_image: str, tmp_path: Path
) -> None:
    """A Slurm task in image mode: the worker runs in the CPU image under the same
    confinement as a docker-executor job (read-only, unprivileged, no network)."""
    job = _worker_job(tmp_path, "pass-01-baseline", TINY)
    outcome = SlurmExecutor(image=cpu_image, shared_root=tmp_path).run_job(job)
    log = outcome.log_path.read_text()
    assert outcome.ok, log
    assert "--read-only" in log and "--network none" in log and "--cap-drop ALL" in log
    rows = (job.out_dir / "benchmark.csv").read_text().splitlines()
    assert rows[1].startswith("tiny,1,16,64,64,PASS")
    provenance = json.loads((job.out_dir / "provenance.json").read_text())
    assert provenance["expected_root"] == "/workspace/target" and provenance["error"] is None


@pytest.mark.slurm
@pytest.mark.docker
def test_a_native_tree_is_built_in_the_image_by_a_slurm_job_and_cached(
    cluster: None, cpu_image: str, tmp_path: Path
) -> None:
    """Slurm with an image builds a native target (docs/primus-turbo.md §6): a job compiles the
    Primus-Turbo-shaped fixture's C extension inside the CPU image into the tree; the
    products go into the build cache; another tree of the same key is a hit (nothing
    compiled) and its ``_C`` imports in the image from the read-only mount the jobs
    use; a failed build raises with its log."""
    from runner.core.errors import MeasurementFailed
    from runner.executors.base import BuildJob
    from runner.executors.build_cache import BuildCache

    spec = importlib.util.spec_from_file_location(
        "rebuild_pipeline", ROOT / "benchmarks" / "rebuild_pipeline.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("rebuild_pipeline", module)
    spec.loader.exec_module(sys.modules["rebuild_pipeline"])
    repo = sys.modules["rebuild_pipeline"].fixture_repo(tmp_path / "repo")
    cache = BuildCache(tmp_path / "cache")
    executor = SlurmExecutor(image=cpu_image, shared_root=tmp_path)

    def job(tree: Path, commands: tuple[tuple[str, ...], ...], key: str) -> BuildJob:
        return BuildJob(
            role="incumbent",
            round=2,
            source_dir=tree,
            key=key,
            cache=cache,
            out_dir=tmp_path / f"build-{tree.name}",
            commands=commands,
        )

    first = tmp_path / "first"
    subprocess.run(["git", "clone", "-q", str(repo), str(first)], check=True)
    built = executor.prepare_role(
        job(first, (("python", "setup.py", "build_ext", "--inplace"),), "k-native")
    )
    log = built.log_path.read_text()
    assert built.outcome == "compile", log
    assert "Slurm job" in log and "--network none" in log
    entry = cache.lookup("k-native")[0]
    assert entry is not None
    (product,) = [p for p in entry.products() if p.startswith("primus_turbo/pytorch/_C")]
    assert product.endswith(".so") and (first / product).is_file(), entry.products()

    second = tmp_path / "second"
    subprocess.run(["git", "clone", "-q", str(repo), str(second)], check=True)
    hit = executor.prepare_role(job(second, (("sh", "-c", "exit 9"),), "k-native"))
    assert hit.outcome == "hit" and (second / product).is_file()
    probe = "import primus_turbo.pytorch._C as c; print(c.__file__)"
    proc = cmd.run(
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "none",
            "--read-only",
            "--mount",
            f"type=bind,source={second},target=/workspace/target,readonly",
            "-w",
            "/workspace/target",
            "-e",
            "PYTHONPATH=/workspace/target",
            cpu_image,
            "python3",
            "-c",
            probe,
        ],
        check=False,
    )
    assert proc.returncode == 0 and proc.stdout.strip() == f"/workspace/target/{product}", (
        proc.stdout
    )

    with pytest.raises(MeasurementFailed, match="exit 9") as failed:
        executor.prepare_role(job(tmp_path / "repo", (("sh", "-c", "exit 9"),), "k-bad"))
    assert failed.value.log_path is not None and "exit 9" in failed.value.log_path.read_text()
    assert cache.lookup("k-bad")[0] is None


def test_a_campaigns_jobs_carry_its_name_and_pid() -> None:
    from runner.executors.slurm_scripts import SlurmSettings
    from runner.store.leftovers import job_comment, parse_job_comment

    argv = sbatch_args(
        Path("/s/t.sh"), job_name="j", output="o", settings=SlurmSettings(campaign="c-1")
    )
    assert f"--comment=turbo-campaign:c-1:{os.getpid()}" in argv and argv[-1] == "/s/t.sh"
    assert "--comment" not in " ".join(
        sbatch_args(Path("/t"), job_name="j", output="o", settings=SlurmSettings())
    )
    assert parse_job_comment(job_comment("a:b", 42)) == ("a:b", 42)
    for other in ("", "someone else's", "turbo-campaign:x:notapid", "turbo-campaign::7"):
        assert parse_job_comment(other) is None


@pytest.mark.slurm
def test_a_killed_campaigns_slurm_job_is_cancelled_by_the_next_command(
    cluster: None, tmp_path: Path
) -> None:
    """kill -9 of the submitting process leaves its job running on the cluster;
    ``campaign status`` names it and the next command of the campaign scancels it."""
    from runner.core.pause_points import PAUSE_ENV, PAUSE_FILE_ENV
    from runner.store.leftovers import clean_leftovers, describe_leftovers

    marker = tmp_path / "paused"
    job = _worker_job(
        tmp_path,
        "pass-01-baseline",
        TINY,
        env={
            "PYTHONPATH": str(tmp_path / "tree"),
            PAUSE_ENV: "worker-pass",
            PAUSE_FILE_ENV: str(marker),
        },
    )
    (tmp_path / "job.pickle").write_bytes(pickle.dumps(job))
    code = (
        "import pickle, sys; from runner.executors.slurm import SlurmExecutor; "
        "job = pickle.load(open(sys.argv[1], 'rb')); "
        "SlurmExecutor(campaign='slurmkill', poll_s=0.2).run_job(job)"
    )
    submitter = subprocess.Popen(
        [sys.executable, "-c", code, str(tmp_path / "job.pickle")], cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 240
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert marker.exists(), "the worker never reached its pause point"
    finally:
        submitter.kill()
        submitter.wait()
    ours = [
        line
        for line in describe_leftovers(tmp_path / "campaigns", "slurmkill", tmp_path)
        if line.startswith("stale worker: slurm ")
    ]
    assert len(ours) == 1, ours
    job_id = ours[0].split()[3]
    done = clean_leftovers(tmp_path / "campaigns", "slurmkill", tmp_path)
    assert any(d.startswith(f"killed stale slurm {job_id}") for d in done), done
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        queued = subprocess.run(
            ["squeue", "-h", "-j", job_id, "-o", "%T"], capture_output=True, text=True
        ).stdout.strip()
        if queued in ("", "CANCELLED", "COMPLETING"):
            break
        time.sleep(0.5)
    assert queued in ("", "CANCELLED", "COMPLETING"), queued
