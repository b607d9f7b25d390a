"""The docker executor against the REAL daemon and the CPU test image.

The ``cpu_image`` fixture (conftest.py) skips them only when ``docker info`` fails and
CI is not set.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from campaign_helpers import remove_cache_volumes

from runner.core.errors import InfrastructureError
from runner.core.prepare_lock import lock_path
from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings, save_spec
from runner.executors.base import WorkerJob
from runner.executors.container import CONTAINER_OUT
from runner.executors.container_worker import ContainerWorker
from runner.executors.docker import DockerExecutor
from runner.executors.docker_args import container_name, docker_create_args
from runner.store.fingerprint import image_digest

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parent.parent


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def campaign() -> Iterator[str]:
    name = f"test-{uuid.uuid4().hex[:8]}"
    yield name
    remove_cache_volumes(name)


def leftover(job_name: str) -> list[str]:
    proc = _docker("ps", "-a", "--filter", f"name=turbo-campaign-{job_name}-", "-q")
    return proc.stdout.split()


def make_job(tmp_path: Path, name: str, **kw: object) -> WorkerJob:
    src = tmp_path / "tree"
    src.mkdir(exist_ok=True)
    spec = tmp_path / "spec.json"
    if not spec.exists():
        spec.write_text('{"hello": "spec"}\n')
    fields: dict[str, object] = {"name": name, "spec_path": spec, "source_dir": src}
    fields["out_dir"] = tmp_path / "out"
    fields.update(kw)
    return WorkerJob(**fields)  # type: ignore[arg-type]


def py(code: str) -> list[str]:
    return ["python3", "-c", code]


WRITE_CSV = (
    "import pathlib, sys; print('hello from', sys.version.split()[0]); "
    "pathlib.Path('/out/benchmark.csv').write_text(open('/workspace/spec.json').read())"
)


def test_artifacts_copied_out_and_container_removed(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    job = make_job(tmp_path, "artifacts", role="candidate")  # its caches are its own
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(WRITE_CSV)).run_job(
        job
    )
    assert outcome.returncode == 0 and outcome.ok
    assert (job.out_dir / "benchmark.csv").read_text() == '{"hello": "spec"}\n'
    assert "hello from 3.11" in (job.out_dir / "container.log").read_text()
    assert outcome.log_path == job.out_dir / "container.log"
    assert leftover("artifacts") == []
    volumes = _docker("volume", "ls", "-q", "--filter", f"name=turbo-campaign-{campaign}-")
    assert sorted(volumes.stdout.split()) == [
        f"turbo-campaign-{campaign}-candidate-ccache",
        f"turbo-campaign-{campaign}-candidate-triton",
    ]


def test_network_is_off_and_tree_is_read_only(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    code = (
        "import os, pathlib; out = pathlib.Path('/out'); "
        "(out / 'net.txt').write_text(' '.join(sorted(os.listdir('/sys/class/net')))); "
        "(out / 'cwd.txt').write_text(os.getcwd() + ' ' + os.environ['PYTHONPATH']); "
        "import probe; (out / 'probe.txt').write_text(probe.VALUE)\n"
        "try:\n  open('/workspace/target/x', 'w')\nexcept OSError as e:\n"
        "  (out / 'ro.txt').write_text(str(e.errno))"
    )
    job = make_job(tmp_path, "netoff")
    (job.source_dir / "probe.py").write_text("VALUE = 'from-the-tree'\n")
    job = make_job(tmp_path, "netoff", env={"PYTHONPATH": str(job.source_dir)})
    DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(code)).run_job(job)
    assert (job.out_dir / "net.txt").read_text() == "lo"
    assert (job.out_dir / "cwd.txt").read_text() == "/workspace/target /workspace/target"
    assert (job.out_dir / "probe.txt").read_text() == "from-the-tree"
    assert (job.out_dir / "ro.txt").read_text() == "30"  # EROFS
    assert not (job.source_dir / "x").exists()


def test_prepare_runs_on_a_copy_not_on_the_host_tree(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    job = make_job(tmp_path, "prepare", prepare=(("sh", "-c", "echo built > artifact.so"),))
    (job.source_dir / "src.py").write_text("x = 1\n")
    code = "import shutil; shutil.copy('artifact.so', '/out/benchmark.csv')"
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(code)).run_job(job)
    assert outcome.ok
    assert (job.out_dir / "benchmark.csv").read_text() == "built\n"
    assert sorted(p.name for p in job.source_dir.iterdir()) == ["src.py"]


def test_failing_job_gives_a_returncode_and_cleans_up(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    code = "import sys; print('about to fail'); sys.exit(3)"
    job = make_job(tmp_path, "failing")
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(code)).run_job(job)
    assert outcome.returncode == 3 and not outcome.ok
    assert "about to fail" in outcome.log_path.read_text()
    assert leftover("failing") == []


def test_failing_prepare_stops_before_the_worker(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    job = make_job(tmp_path, "badprep", prepare=(("sh", "-c", "echo compile error; exit 7"),))
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(WRITE_CSV)).run_job(
        job
    )
    assert outcome.returncode == 7
    assert "compile error" in outcome.log_path.read_text()
    assert not (job.out_dir / "benchmark.csv").exists()
    assert leftover("badprep") == []


def test_timeout_kills_and_cleans_up(cpu_image: str, campaign: str, tmp_path: Path) -> None:
    job = make_job(tmp_path, "slow", timeout_s=3)
    code = "import time; print('sleeping', flush=True); time.sleep(60)"
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign, command=py(code)).run_job(job)
    assert outcome.returncode == 124
    assert "sleeping" in outcome.log_path.read_text()
    assert leftover("slow") == []


def test_keep_leaves_the_container(cpu_image: str, campaign: str, tmp_path: Path) -> None:
    job = make_job(tmp_path, "kept")
    executor = DockerExecutor(
        cpu_image, gpu=None, campaign=campaign, keep=True, command=py(WRITE_CSV)
    )
    try:
        assert executor.run_job(job).ok
        assert len(leftover("kept")) == 1
    finally:
        for ctr in leftover("kept"):
            _docker("rm", "-f", ctr)
    assert leftover("kept") == []


def test_missing_image_is_an_infrastructure_error(campaign: str, tmp_path: Path) -> None:
    if _docker("info").returncode != 0:
        pytest.skip("no Docker daemon")
    job = make_job(tmp_path, "noimage")
    executor = DockerExecutor("turbo-campaign/does-not-exist:0", gpu=None, campaign=campaign)
    with pytest.raises(InfrastructureError, match="never pulled"):
        executor.run_job(job)
    assert leftover("noimage") == []


def test_image_digest(cpu_image: str) -> None:
    digest = image_digest(cpu_image)
    assert digest.startswith("sha256:") and len(digest) == 71


def test_real_worker_on_the_example_package(cpu_image: str, campaign: str, tmp_path: Path) -> None:
    """``python -m runner.worker`` in the container measures the mounted example tree."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "examples", tree, ignore=shutil.ignore_patterns("__pycache__"))
    spec = RoundSpec(
        campaign=campaign,
        round=1,
        role="baseline",
        pass_index=0,
        level="quick",
        target="example",
        op="gemm",
        options={"backend": "TORCH", "granularity": None},
        shapes=(Shape("tiny", 64, 64, 64),),
        device="cpu",
        timing=TimingSettings(warmup_s=0.01, repeats=3, max_repeats=3, budget_s=0.2, batch_s=0.01),
    )
    save_spec(tmp_path / "spec.json", spec)
    env = {"PYTHONPATH": str(tree), "TURBO_KERNELS_GEMM_BACKEND": "TORCH"}
    job = make_job(tmp_path, "worker", env=env, timeout_s=300)
    outcome = DockerExecutor(cpu_image, gpu=None, campaign=campaign).run_job(job)
    log = outcome.log_path.read_text()
    assert outcome.ok, log
    names = {p.name for p in job.out_dir.iterdir()}
    assert {"benchmark.csv", "samples.json", "worker.log", "container.log"} <= names
    rows = (job.out_dir / "benchmark.csv").read_text().splitlines()
    assert rows[0].startswith("label,B,M,N,K,Check,") and rows[1].startswith("tiny,1,64,64,64,PASS")
    assert CONTAINER_OUT == "/out" and leftover("worker") == []


FAKE_ROCM = """FROM {base}
RUN mkdir -p /opt/rocm/lib/llvm/bin \\
 && printf '#!/bin/sh\\necho fake-clang "$@"\\n' > /opt/rocm/lib/llvm/bin/clang++ \\
 && cp /opt/rocm/lib/llvm/bin/clang++ /opt/rocm/lib/llvm/bin/clang \\
 && chmod +x /opt/rocm/lib/llvm/bin/*
"""


def test_rocm_dockerfile_on_a_fake_rocm_base(cpu_image: str, tmp_path: Path) -> None:
    """Dockerfile.rocm for real, on the CPU image plus a fake /opt/rocm: the workspace
    stage builds, the entrypoint finds ROCm and wires ccache for hipcc, and the turbo
    stage stops at once without GPU_ARCHS."""
    tag = f"turbo-campaign/test-fake-rocm:{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, DOCKER_BUILDKIT="0")
    build = ["docker", "build", "--force-rm", "-f", str(ROOT / "Dockerfile.rocm"), "--build-arg"]
    try:
        fake = subprocess.run(
            ["docker", "build", "--force-rm", "-t", f"{tag}-base", "-"],
            input=FAKE_ROCM.format(base=cpu_image),
            env=env,
            capture_output=True,
            text=True,
        )
        assert fake.returncode == 0, fake.stdout + fake.stderr
        # the fake base has no Triton to pin (docs/analysis.md §1): keep it as it is
        args = [*build, f"BASE_IMAGE={tag}-base", "--build-arg", "TRITON_VERSION="]
        ws = subprocess.run(
            [*args, "--target", "workspace", "-t", tag, str(ROOT)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert ws.returncode == 0, ws.stdout[-3000:] + ws.stderr
        probe = (
            "echo $ROCM_PATH $HIP_CLANG_PATH; $HIP_CLANG_PATH/clang++ -v; "
            'python3 -c "import runner.worker"'
        )
        run = _docker(
            "run", "--rm", "--network", "none", "-e", "CCACHE_DIR=/tmp/cc", tag, "sh", "-c", probe
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.startswith("/opt/rocm /opt/ccache/llvm\nfake-clang -v\n")
        turbo = subprocess.run(
            [*args, "--target", "turbo", str(ROOT)], env=env, capture_output=True, text=True
        )
        assert turbo.returncode != 0
        assert "GPU_ARCHS is empty" in turbo.stdout + turbo.stderr
    finally:
        _docker("rmi", "-f", tag, f"{tag}-base")
        for kind in ("turbo", "workspace"):  # the classic builder's dangling stage images
            _docker("image", "prune", "-f", "--filter", f"label=turbo-campaign.kind={kind}")


# a serving worker's stand-in: on "detach" it double-forks a busy helper into a new
# session (no longer its descendant) and answers "ok"; it exits when its stdin closes
DETACHING_WORKER = """
import os, sys
for line in sys.stdin:
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                pass
        os._exit(0)
    os.wait()
    print("ok", flush=True)
"""


def test_a_serving_container_is_paused_whole_and_its_detached_helper_is_counted(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    """``DockerExecutor.start_worker``: the worker talks over the attached client's
    stdin/stdout; the container's cgroup counts the CPU time of a helper the worker
    detached (``cpu_clock``, outside the worker's process tree), ``pause`` freezes the
    helper with the worker, and ``release`` removes the container."""
    job = make_job(tmp_path, "serve-detach")
    executor = DockerExecutor(
        cpu_image, gpu=None, campaign=campaign, serve_command=py(DETACHING_WORKER)
    )
    live = executor.start_worker(job)
    assert live.proc is not None and live.proc.stdin is not None and live.proc.stdout
    try:
        live.proc.stdin.write(b"detach\n")
        live.proc.stdin.flush()
        assert live.proc.stdout.readline() == b"ok\n"
        clock, off = live.cpu_clock()
        assert clock is not None, off
        clock.start()
        time.sleep(1.0)
        assert clock.foreign_seconds() > 0.5  # the helper spun beside the idle worker
        assert live.pause()
        frozen = clock.group.cpu_seconds() or 0.0
        time.sleep(0.5)
        assert (clock.group.cpu_seconds() or 0.0) - frozen < 0.05
        live.resume()
        time.sleep(0.3)
        assert (clock.group.cpu_seconds() or 0.0) - frozen > 0.1
        live.proc.stdin.close()
        assert live.proc.wait(timeout=60) == 0
    finally:
        live.proc.stdout.close()
        live.release()
    assert leftover("serve-detach") == []
    assert "--interactive" in (job.out_dir / "docker_run.txt").read_text()


# takes the preparation lock the container was given, without waiting: exit 0 if it got
# it, 75 if another process holds it
TRY_LOCK = """
import errno, fcntl, os, sys
fd = os.open(os.environ["TURBO_CAMPAIGN_PREPARE_LOCK"], os.O_RDONLY)
try:
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
except OSError as exc:
    sys.exit(75 if exc.errno in (errno.EAGAIN, errno.EACCES) else 1)
"""


def test_a_container_s_preparation_lock_is_the_host_device_s(
    cpu_image: str, campaign: str, tmp_path: Path
) -> None:
    """The lock file mounted into a serving worker's container (``prepare_lock``) is the
    host's: a container cannot take it while a host process holds it, and can once it
    is free, so workers in containers prepare alone on a device as local ones do."""
    lock = lock_path(tmp_path / "leases", "0")
    job = make_job(tmp_path, "lock-try")

    def try_lock() -> int:
        name = container_name(job.name)
        args = docker_create_args(
            job,
            cpu_image,
            None,
            name=name,
            campaign=campaign,
            caches=False,
            command=py(TRY_LOCK),
            prepare_lock=lock,
        )
        os.chmod(job.out_dir, 0o777)
        subprocess.run(args, check=True, capture_output=True)
        try:
            return subprocess.run(["docker", "start", "--attach", name], check=False).returncode
        finally:
            _docker("rm", "--force", name)

    job.out_dir.mkdir()
    held = os.open(lock, os.O_RDONLY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert try_lock() == 75
        fcntl.flock(held, fcntl.LOCK_UN)
        assert try_lock() == 0
    finally:
        os.close(held)


def test_a_container_that_cannot_be_paused_stops_the_round_saying_why(
    cpu_image: str, tmp_path: Path
) -> None:
    """Turn-taking needs the idle partner stopped: a ``docker pause`` that fails for
    another reason than a container that ended is an infrastructure error, never a
    turn timed beside a running partner."""
    client = subprocess.Popen(["sleep", "30"])
    try:
        live = ContainerWorker(
            "w", tmp_path, tmp_path / "log", client, container="turbo-campaign-no-such-one"
        )
        with pytest.raises(InfrastructureError, match="docker pause turbo-campaign-no-such-one"):
            live.pause()
    finally:
        client.kill()
        client.wait()
