"""Exact argv of the docker executor and of ``campaign image`` (pure: no daemon)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from runner.cli import cli
from runner.core.errors import CommandFailed, ConfigError, InfrastructureError
from runner.core.prepare_lock import lock_path
from runner.executors import container as cx
from runner.executors import docker as dx
from runner.executors import docker_args as da
from runner.executors.base import WorkerJob
from runner.executors.images import ImageRequest, rocm_build_args
from runner.store.leases import lease_dir

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = "set -e\nmkdir -p /out\nexec python3 -m runner.worker /workspace/spec.json /out"
COMMON = ["--init", "--pull", "never", "--network", "none", "--workdir", "/workspace/target"]
CACHES = [
    "--mount",
    "type=volume,source=turbo-campaign-c1-triton,target=/cache/triton",
    "--mount",
    "type=volume,source=turbo-campaign-c1-ccache,target=/cache/ccache",
]
SOURCE_ENV = ["-e", "TURBO_CAMPAIGN_SOURCE=/workspace/target"]
CACHE_ENV = ["-e", "TRITON_CACHE_DIR=/cache/triton", "-e", "CCACHE_DIR=/cache/ccache"]
# a worker keeps Triton's autotune results in its role's cache volume; a build does not
WORKER_CACHE_ENV = [*CACHE_ENV, "-e", "TRITON_CACHE_AUTOTUNING=1"]


def make_job(tmp_path: Path, **kw: object) -> WorkerJob:
    src = tmp_path / "wt"
    src.mkdir(exist_ok=True)
    (tmp_path / "spec.json").write_text("{}\n")  # a real job always has its spec
    fields: dict[str, object] = {
        "name": "pass-01-candidate",
        "spec_path": tmp_path / "spec.json",
        "source_dir": src,
        "out_dir": tmp_path / "out",
    }
    fields.update(kw)
    return WorkerJob(**fields)  # type: ignore[arg-type]


def labels(job: WorkerJob) -> list[str]:
    return [
        "--label",
        "turbo-campaign.campaign=c1",
        "--label",
        f"turbo-campaign.job={job.name}",
        "--label",
        f"turbo-campaign.pid={os.getpid()}",
    ]


USER = "65534:65534" if os.getuid() == 0 else f"{os.getuid()}:{os.getgid()}"


def confine(job: WorkerJob, measuring: bool, limits: bool = True) -> list[str]:
    """The containment options: every job, plus the unprivileged read-only root
    filesystem for a measuring/test job (the source mounted read-only)."""
    args = ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    if limits:
        args += ["--pids-limit", "4096", "--memory", "64g"]
    args += [
        "--mount",
        f"type=bind,source={job.spec_path},target=/workspace/spec.json,readonly",
        "--mount",
        f"type=bind,source={job.out_dir},target=/out",
    ]
    if measuring:
        args += ["--user", USER, "--read-only", "--tmpfs", "/tmp:rw,nosuid,nodev,exec,size=4g"]
    return args


HOME = ["-e", "HOME=/tmp"]


def test_cpu_job_argv_mounts_the_tree_read_only(tmp_path: Path) -> None:
    job = make_job(tmp_path, env={"PYTHONPATH": f"{tmp_path}/wt/src"})
    args = da.docker_create_args(job, "img:1", None, name="ctr", campaign="c1")
    assert args == [
        "docker",
        "create",
        "--name",
        "ctr",
        *COMMON,
        *labels(job),
        *confine(job, True),
        *CACHES,
        "--mount",
        f"type=bind,source={tmp_path}/wt,target=/workspace/target,readonly",
        *HOME,
        *WORKER_CACHE_ENV,
        "-e",
        "PYTHONDONTWRITEBYTECODE=1",
        *SOURCE_ENV,
        "-e",
        "PYTHONPATH=/workspace/target/src",
        "img:1",
        "sh",
        "-c",
        SCRIPT,
    ]
    assert "--privileged" not in args


def test_amd_job_with_prepare_copies_the_tree_and_passes_only_its_render_node(
    tmp_path: Path,
) -> None:
    gpu = cx.GpuRequest("amd", (1,), (129,))
    job = make_job(
        tmp_path,
        prepare=(("pip", "install", "--no-build-isolation", "-e", "."),),
        env={"PRIMUS_TURBO_GEMM_BACKEND": "TRITON"},
    )
    args = da.docker_create_args(job, "rocm:1", gpu, name="ctr", campaign="c1", caches=False)
    script = (
        "set -e\nmkdir -p /out\npip install --no-build-isolation -e .\n"
        "exec python3 -m runner.worker /workspace/spec.json /out"
    )
    assert args == [
        "docker",
        "create",
        "--name",
        "ctr",
        *COMMON,
        *labels(job),
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri/renderD129",
        "--ipc=host",
        "--security-opt",
        "seccomp=unconfined",
        *confine(job, False),
        *SOURCE_ENV,
        "-e",
        "PRIMUS_TURBO_GEMM_BACKEND=TRITON",
        "rocm:1",
        "sh",
        "-c",
        script,
    ]
    assert "--privileged" not in args


@pytest.mark.parametrize(("indices", "value"), [((0,), "device=0"), ((2, 3), '"device=2,3"')])
def test_nvidia_job_argv(tmp_path: Path, indices: tuple[int, ...], value: str) -> None:
    job = make_job(tmp_path)
    gpu = cx.GpuRequest("nvidia", indices)
    args = da.docker_create_args(
        job, "img", gpu, name="ctr", campaign="c1", caches=False, source_mode="copy"
    )
    assert args == [
        "docker",
        "create",
        "--name",
        "ctr",
        *COMMON,
        *labels(job),
        "--gpus",
        value,
        *confine(job, False),
        *SOURCE_ENV,
        "img",
        "sh",
        "-c",
        SCRIPT,
    ]


def test_env_translation_rewrites_every_host_path(tmp_path: Path) -> None:
    job = make_job(
        tmp_path,
        env={
            "PYTHONPATH": f"{tmp_path}/wt/src:{tmp_path}/wt:/opt/other",
            "SPEC": f"{tmp_path}/spec.json",
            "OUT": f"{tmp_path}/out/x.csv",
            "NOT_A_PREFIX": f"{tmp_path}/wtx",
        },
    )
    assert cx.translate_env(job) == {
        "PYTHONPATH": "/workspace/target/src:/workspace/target:/opt/other",
        "SPEC": "/workspace/spec.json",
        "OUT": "/out/x.csv",
        "NOT_A_PREFIX": f"{tmp_path}/wtx",
    }


def test_custom_command_and_quoted_prepare(tmp_path: Path) -> None:
    job = make_job(tmp_path, prepare=(("sh", "-c", "echo 'a b' > f"),))
    assert cx.job_script(job, ["python3", "/x y.py"]) == [
        "sh",
        "-c",
        "set -e\nmkdir -p /out\nsh -c 'echo '\"'\"'a b'\"'\"' > f'\nexec python3 '/x y.py'",
    ]


def test_prepare_with_a_read_only_mount_is_refused(tmp_path: Path) -> None:
    job = make_job(tmp_path, prepare=(("make",),))
    with pytest.raises(ConfigError, match="source_mode='copy'"):
        da.docker_create_args(job, "img", None, name="c", campaign="c1", source_mode="mount")


def test_names_are_unique_and_docker_safe() -> None:
    a, b = da.container_name("pass 01/cand"), da.container_name("pass 01/cand")
    assert a != b
    assert a.startswith("turbo-campaign-pass-01-cand-") and len(a) == len(b)
    assert da.cache_volumes("gemm_fp8 x") == {
        "turbo-campaign-gemm_fp8-x-triton": "/cache/triton",
        "turbo-campaign-gemm_fp8-x-ccache": "/cache/ccache",
    }


def test_a_role_mounts_only_its_own_tree_and_its_own_caches(tmp_path: Path) -> None:
    """docs/reliability.md §7 row 14: the other role's tree, the
    campaign folder and the scratch folder (the paths a local job gets read-only) are
    not in the container at all; the spec is read-only, the out folder the only
    writable host path; the compiler caches are the role's own volumes."""
    other, camp = tmp_path / "wt-incumbent", tmp_path / "campaign"
    other.mkdir()
    camp.mkdir()
    job = make_job(tmp_path, role="candidate", readonly=(other, camp, tmp_path))
    args = da.docker_create_args(job, "img:1", None, name="ctr", campaign="c1")
    mounts = [args[i + 1] for i, a in enumerate(args) if a == "--mount"]
    binds = [m for m in mounts if m.startswith("type=bind")]
    assert binds == [
        f"type=bind,source={tmp_path}/spec.json,target=/workspace/spec.json,readonly",
        f"type=bind,source={tmp_path}/out,target=/out",
        f"type=bind,source={tmp_path}/wt,target=/workspace/target,readonly",
    ]
    assert not any(str(other) in a or str(camp) in a for a in args)
    volumes = [m for m in mounts if m.startswith("type=volume")]
    assert volumes == [
        "type=volume,source=turbo-campaign-c1-candidate-triton,target=/cache/triton",
        "type=volume,source=turbo-campaign-c1-candidate-ccache,target=/cache/ccache",
    ]
    assert da.cache_volumes("c1", "incumbent") != da.cache_volumes("c1", "candidate")


def test_gpu_request_validation() -> None:
    with pytest.raises(ConfigError, match="render node"):
        cx.GpuRequest("amd", (0, 1), (128,))
    with pytest.raises(ConfigError, match="at least one"):
        cx.GpuRequest("nvidia", ())


def test_keep_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(dx.KEEP_ENV, raising=False)
    assert dx.DockerExecutor("i", gpu=None, campaign="c").keep is False
    assert dx.DockerExecutor("i", gpu=None, campaign="c", keep=True).keep is True
    monkeypatch.setenv(dx.KEEP_ENV, "1")
    assert dx.DockerExecutor("i", gpu=None, campaign="c").keep is True


def test_image_build_argv_turbo(tmp_path: Path) -> None:
    req = ImageRequest(
        gpu_archs="gfx942;GFX950", turbo_src=tmp_path, max_jobs="32", turbo_commit="abc"
    )
    assert rocm_build_args(req, ROOT) == [
        "docker",
        "build",
        "--file",
        f"{ROOT}/Dockerfile.rocm",
        "--target",
        "turbo",
        "--build-context",
        f"turbo={tmp_path}",
        "--build-arg",
        "GPU_ARCHS=gfx942;gfx950",
        "--build-arg",
        "TURBO_COMMIT=abc",
        "--build-arg",
        "MAX_JOBS=32",
        "--tag",
        "turbo-campaign/rocm:gfx942-gfx950",
        str(ROOT),
    ]


def test_image_build_argv_workspace() -> None:
    assert rocm_build_args(ImageRequest(workspace=True, tag="ws:1"), ROOT) == [
        "docker",
        "build",
        "--file",
        f"{ROOT}/Dockerfile.rocm",
        "--target",
        "workspace",
        "--tag",
        "ws:1",
        str(ROOT),
    ]


@pytest.mark.parametrize(("archs", "match"), [(None, "required"), ("gfx90a", "unsupported")])
def test_image_build_needs_valid_archs(tmp_path: Path, archs: str | None, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        rocm_build_args(ImageRequest(gpu_archs=archs, turbo_src=tmp_path), ROOT)


def test_cli_image_print(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("MAX_JOBS", raising=False)
    result = CliRunner().invoke(
        cli, ["image", "--print", "--gpu-archs", "gfx942", "--turbo-src", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert result.output == (
        f"docker build --file {ROOT}/Dockerfile.rocm --target turbo --build-context "
        f"turbo={tmp_path} --build-arg GPU_ARCHS=gfx942 --build-arg TURBO_COMMIT=unknown "
        f"--tag turbo-campaign/rocm:gfx942 {ROOT}\n"
    )


def test_cli_image_print_reads_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPU_ARCHS", "gfx950")
    monkeypatch.setenv("TURBO_SRC", str(tmp_path))
    monkeypatch.setenv("MAX_JOBS", "8")
    result = CliRunner().invoke(cli, ["image", "--print", "--tag", "t:1"])
    assert result.exit_code == 0, result.output
    assert "--build-arg GPU_ARCHS=gfx950 " in result.output
    assert "--build-arg MAX_JOBS=8 --tag t:1 " in result.output


def test_find_rocm_order(tmp_path: Path) -> None:
    """find-rocm.sh prefers `rocm-sdk path --root`, then `hipconfig --rocmpath`."""
    bin_dir, therock, hip = tmp_path / "bin", tmp_path / "venv-rocm", tmp_path / "hip-rocm"
    for d in (bin_dir, therock, hip):
        d.mkdir()
    tool = bin_dir / "hipconfig"
    tool.write_text(f"#!/bin/sh\necho {hip}\n")
    tool.chmod(0o755)
    script = str(ROOT / "docker" / "find-rocm.sh")
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    out = subprocess.run(["sh", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(hip)
    sdk = bin_dir / "rocm-sdk"
    sdk.write_text(f'#!/bin/sh\n[ "$1 $2" = "path --root" ] && echo {therock}\n')
    sdk.chmod(0o755)
    out = subprocess.run(["sh", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(therock)


@pytest.mark.skipif(Path("/opt/rocm").is_dir(), reason="this host has /opt/rocm")
def test_find_rocm_fails_with_the_fix(tmp_path: Path) -> None:
    script = str(ROOT / "docker" / "find-rocm.sh")
    out = subprocess.run(
        ["sh", script], env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert out.returncode == 1 and out.stdout == ""
    assert "set ROCM_PATH" in out.stderr


class FakeDocker:
    """Records every ``runner.core.processes.run`` call and answers like a docker CLI."""

    def __init__(self, fail_on: str | None = None, output: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on
        self.output = output

    def __call__(self, cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        args = [str(c) for c in cmd]
        self.calls.append(args)
        if self.fail_on and args[1] == self.fail_on:
            raise CommandFailed(args, 1, self.output)
        stdout = "0\n" if args[1] == "inspect" else "log line\n"
        return subprocess.CompletedProcess(args, 0, stdout, None)


def test_run_job_sequence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeDocker()
    monkeypatch.setattr(dx.cmd, "run", fake)
    monkeypatch.delenv(dx.KEEP_ENV, raising=False)
    job = make_job(tmp_path, prepare=(("make",),))
    outcome = dx.DockerExecutor("img", gpu=None, campaign="c1").run_job(job)
    assert fake.calls[0][1:3] == ["image", "inspect"]  # the digest for image.json
    name = fake.calls[1][3]
    assert [c[1:] for c in fake.calls[2:]] == [
        ["cp", f"{job.source_dir}/.", f"{name}:/workspace/target"],
        ["start", "--attach", name],
        ["inspect", "--format", "{{.State.ExitCode}}", name],
        ["logs", name],
        ["rm", "--force", "--volumes", name],
    ]
    assert outcome.returncode == 0
    assert (job.out_dir / "container.log").read_text() == "log line\n"
    assert json.loads((job.out_dir / "image.json").read_text())["image"] == "img"
    assert "\ndocker run --rm " in (job.out_dir / "docker_run.txt").read_text()


def test_daemon_down_is_an_infrastructure_error_with_the_fix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = "Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
    fake = FakeDocker(fail_on="create", output=out)
    monkeypatch.setattr(dx.cmd, "run", fake)
    with pytest.raises(InfrastructureError, match=r"docker/ci-setup\.sh does it"):
        dx.DockerExecutor("img", gpu=None, campaign="c1").run_job(make_job(tmp_path))
    assert fake.calls[-1][1:4] == ["rm", "--force", "--volumes"]  # cleanup on failed create


def test_interrupt_during_the_run_still_removes_the_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeDocker()

    def interrupted(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
        if cmd[1] == "start":
            raise KeyboardInterrupt
        return fake(cmd, **kw)

    monkeypatch.setattr(dx.cmd, "run", interrupted)
    monkeypatch.delenv(dx.KEEP_ENV, raising=False)
    with pytest.raises(KeyboardInterrupt):
        dx.DockerExecutor("img", gpu=None, campaign="c1").run_job(make_job(tmp_path))
    assert fake.calls[-1][1:3] == ["rm", "--force"]


def test_docker_run_line_is_the_create_argv_as_one_run(tmp_path: Path) -> None:
    job = make_job(tmp_path)
    create = da.docker_create_args(job, "img:1", None, name="ctr", campaign="c1", caches=False)
    line = da.docker_run_line(job, create, "img:1")
    head, run = line.rstrip("\n").split("\n", 1)
    assert (
        head
        == "# job pass-01-candidate: equivalent of the runner's create/cp/start/cp for this job"
    )
    assert run == shlex.join(
        [
            "docker",
            "run",
            "--rm",
            *COMMON,
            *labels(job),
            *confine(job, True),
            "--mount",
            f"type=bind,source={tmp_path}/wt,target=/workspace/target,readonly",
            *HOME,
            "-e",
            "PYTHONDONTWRITEBYTECODE=1",
            *SOURCE_ENV,
            "img:1",
            "sh",
            "-c",
            SCRIPT,
        ]
    )
    copied = make_job(tmp_path, prepare=(("make",),))
    create = da.docker_create_args(copied, "img:1", None, name="c", campaign="c1", caches=False)
    lines = da.docker_run_line(copied, create, "img:1").split("\n", 2)
    assert "was copied to /workspace/target (docker cp)" in lines[1]
    assert lines[2].startswith("docker run --rm --init ")
    with pytest.raises(ValueError, match="not a docker create argv"):
        da.docker_run_line(job, create, "other:2")


TOPOLOGY = Path(__file__).resolve().parent / "data" / "kfd_topology"


def test_render_nodes_from_the_kfd_topology() -> None:
    nodes = TOPOLOGY / "nodes"
    assert cx.render_nodes_for([0], nodes) == ["/dev/dri/renderD128"]
    assert cx.render_nodes_for([3, 7], nodes) == ["/dev/dri/renderD152", "/dev/dri/renderD184"]
    with pytest.raises(ConfigError, match="lists 8 GPUs"):
        cx.render_nodes_for([8], nodes)
    with pytest.raises(InfrastructureError, match="no KFD topology"):
        cx.render_nodes_for([0], TOPOLOGY / "missing")


def test_render_nodes_read_gpu_id_from_properties_without_the_file(tmp_path: Path) -> None:
    for n, (gpu_id, minor) in enumerate([(0, 0), (0, 0), (777, 129), (778, 130)]):
        (tmp_path / str(n)).mkdir()
        (tmp_path / str(n) / "properties").write_text(
            f"cpu_cores_count 4\ndrm_render_minor {minor}\ngpu_id {gpu_id}\n"
        )
    assert cx.render_nodes_for([1, 0], tmp_path) == ["/dev/dri/renderD130", "/dev/dri/renderD129"]


def test_amd_argv_for_two_gpus_of_the_sample_topology(tmp_path: Path) -> None:
    gpu = cx.GpuRequest.amd(
        [2, 5], topology_root=TOPOLOGY / "nodes", group_file=TOPOLOGY / "group", memory="64g"
    )
    assert gpu == cx.GpuRequest("amd", (2, 5), (144, 168), (44, 993), "16g", "64g", 4096)
    job = make_job(tmp_path)
    args = da.docker_create_args(
        job, "rocm:1", gpu, name="ctr", campaign="c1", caches=False, source_mode="copy"
    )
    assert args == [
        "docker",
        "create",
        "--name",
        "ctr",
        *COMMON,
        *labels(job),
        "--device",
        "/dev/kfd",
        "--device",
        "/dev/dri/renderD144",
        "--device",
        "/dev/dri/renderD168",
        "--group-add",
        "44",
        "--group-add",
        "993",
        "--ipc=host",
        "--security-opt",
        "seccomp=unconfined",
        "--shm-size",
        "16g",
        "--memory",
        "64g",
        "--pids-limit",
        "4096",
        *confine(job, False, limits=False),
        *SOURCE_ENV,
        "rocm:1",
        "sh",
        "-c",
        SCRIPT,
    ]
    assert "--privileged" not in args and "/dev/dri" not in args


# ---- per-job leased GPUs (RoundPlan.worker_job / sharding -> WorkerJob.gpus -> the container) ----
AMD_SETTINGS = [
    "--ipc=host",
    "--security-opt",
    "seccomp=unconfined",
    "--shm-size",
    "16g",
    "--pids-limit",
    "4096",
]


def confine_amd(job: WorkerJob) -> list[str]:
    """The AMD request sets its own pids limit; the memory limit is the default one."""
    base = confine(job, False, limits=False)
    return [*base[:4], "--memory", "64g", *base[4:]]


def leased_executor(vendor: str) -> dx.DockerExecutor:
    return dx.DockerExecutor(
        "rocm:1",
        gpu=None,
        campaign="c1",
        caches=False,
        source_mode="copy",
        vendor=vendor,  # type: ignore[arg-type]
        topology_root=TOPOLOGY / "nodes",
        group_file=TOPOLOGY / "group",
    )


@pytest.mark.parametrize(
    ("leased", "nodes"),
    [
        ((3,), [["--device", "/dev/dri/renderD152"]]),
        ((0, 1), [["--device", "/dev/dri/renderD128"], ["--device", "/dev/dri/renderD136"]]),
    ],
)
def test_amd_each_job_gets_only_its_leased_gpu_numbered_0_inside(
    tmp_path: Path, leased: tuple[int, ...], nodes: list[list[str]]
) -> None:
    """One job per leased GPU (a sharded round runs one per GPU): each container gets
    /dev/kfd and that GPU's render node only, the video/render groups, and sees it as
    device 0 (the host's ROCR_VISIBLE_DEVICES=<index> that RoundPlan.worker_job sets
    would hide it)."""
    executor = leased_executor("amd")
    for gpu, node in zip(leased, nodes, strict=True):
        host_env = {
            "ROCR_VISIBLE_DEVICES": str(gpu),
            "HIP_VISIBLE_DEVICES": "0",
            "CUDA_VISIBLE_DEVICES": "0",
        }
        job = make_job(tmp_path, name=f"pass-01-candidate-gpu{gpu}", env=host_env, gpus=(gpu,))
        args = executor.create_args(job, "ctr")
        assert args == [
            "docker",
            "create",
            "--name",
            "ctr",
            *COMMON,
            *labels(job),
            "--device",
            "/dev/kfd",
            *node,
            "--group-add",
            "44",
            "--group-add",
            "993",
            *AMD_SETTINGS,
            *confine_amd(job),
            *SOURCE_ENV,
            "-e",
            "ROCR_VISIBLE_DEVICES=0",
            "-e",
            "HIP_VISIBLE_DEVICES=0",
            "-e",
            "CUDA_VISIBLE_DEVICES=0",
            "rocm:1",
            "sh",
            "-c",
            SCRIPT,
        ]
        assert "--privileged" not in args


@pytest.mark.parametrize("leased", [(5,), (0, 1)])
def test_nvidia_each_job_gets_only_its_leased_gpu_numbered_0_inside(
    tmp_path: Path, leased: tuple[int, ...]
) -> None:
    executor = leased_executor("nvidia")
    for gpu in leased:
        job = make_job(
            tmp_path,
            name=f"pass-02-incumbent-gpu{gpu}",
            env={"CUDA_VISIBLE_DEVICES": str(gpu)},
            gpus=(gpu,),
        )
        args = executor.create_args(job, "ctr")
        assert args == [
            "docker",
            "create",
            "--name",
            "ctr",
            *COMMON,
            *labels(job),
            "--gpus",
            f"device={gpu}",
            *confine(job, False),
            *SOURCE_ENV,
            "-e",
            "CUDA_VISIBLE_DEVICES=0",
            "rocm:1",
            "sh",
            "-c",
            SCRIPT,
        ]
        assert "--privileged" not in args


def test_sharded_jobs_reach_docker_each_with_its_own_device(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the sharding host (run_job(PlainHost, ..., gpu=N)) and DockerExecutor.run_job:
    the docker create of the job on GPU 0 names renderD128 only, on GPU 1 renderD136."""
    from runner.core.spec import RoundSpec, TimingSettings
    from runner.measure.host import PlainHost, run_job
    from runner.measure.sharding import gpu_env

    fake = FakeDocker()
    monkeypatch.setattr(dx.cmd, "run", fake)
    template = RoundSpec(
        "c1", 2, "incumbent", 0, "full", "example", "gemm", {}, (), TimingSettings()
    )
    host = PlainHost(tmp_path, leased_executor("amd"), template)
    tree = tmp_path / "wt"
    tree.mkdir()
    for gpu in (0, 1):
        spec = host.template.for_pass("incumbent", 1, [])
        run_job(host, f"pass-01-incumbent-gpu{gpu}", spec, tree, env=gpu_env(gpu, "amd"), gpu=gpu)
    creates = [c for c in fake.calls if c[1] == "create"]
    assert len(creates) == 2
    for gpu, create in zip((0, 1), creates, strict=True):
        nodes = [create[i + 1] for i, a in enumerate(create) if a == "--device"]
        assert nodes == ["/dev/kfd", f"/dev/dri/renderD{128 + 8 * gpu}"]
        assert "ROCR_VISIBLE_DEVICES=0" in create


# ---- the per-role build container (native targets) -----------------------------------
def test_build_container_argv_replaces_the_image_tree_with_a_writable_copy(
    tmp_path: Path,
) -> None:
    from runner.executors.base import BuildJob
    from runner.executors.build_cache import BuildCache

    build = BuildJob(
        "candidate",
        3,
        tmp_path / "wt",
        tmp_path / "out",
        "k" * 64,
        BuildCache(tmp_path),
        commands=(("pip", "install", "--no-build-isolation", "-e", "."),),
        env={"GPU_ARCHS": "gfx942"},
    )
    args = da.build_create_args(build, "rocm:1", name="b", campaign="c1")
    assert args[:-1] == [
        "docker",
        "create",
        "--name",
        "b",
        "--init",
        "--pull",
        "never",
        "--network",
        "none",
        "--workdir",
        "/",
        "--label",
        "turbo-campaign.campaign=c1",
        "--label",
        "turbo-campaign.build=candidate",
        "--label",
        f"turbo-campaign.pid={os.getpid()}",
        "--cap-drop",
        "ALL",
        "--security-opt",
        "no-new-privileges",
        "--pids-limit",
        "4096",
        "--mount",
        "type=volume,source=turbo-campaign-c1-candidate-triton,target=/cache/triton",
        "--mount",
        "type=volume,source=turbo-campaign-c1-candidate-ccache,target=/cache/ccache",
        *CACHE_ENV,
        "-e",
        "GPU_ARCHS=gfx942",
        "rocm:1",
        "sh",
        "-c",
    ]
    script = args[-1].splitlines()
    assert script[:5] == [
        "set -e",
        "cd /",
        "rm -rf /workspace/target /workspace/.turbo-build",
        "mv /workspace/incoming /workspace/target",
        "cd /workspace/target",
    ]
    # the files the build adds are listed before and after it, with their checksums,
    # the completion marker last
    assert script[6] == "pip install --no-build-isolation -e ."
    assert script[5].endswith("> /tmp/turbo-before") and script[8].endswith("> /tmp/turbo-after")
    assert script[-1] == (
        "sha256sum /workspace/.turbo-build/products /workspace/.turbo-build/products.sha256 "
        "> /workspace/.turbo-build/complete"
    )
    assert "--privileged" not in args and not any("readonly" in a for a in args)


def test_a_cached_build_is_checked_then_gets_the_roles_own_tree(tmp_path: Path) -> None:
    from runner.executors.base import BuildJob
    from runner.executors.build_cache import BuildCache

    build = BuildJob(
        "candidate",
        3,
        tmp_path / "wt",
        tmp_path / "out",
        "k" * 64,
        BuildCache(tmp_path),
        commands=(("pip", "install", "-e", "."),),
    )
    cached = da.cache_tag("k" * 64, tmp_path)
    args = da.build_create_args(
        build, "rocm:1", name="b", campaign="c1", caches=False, cached=cached
    )
    assert args[-4] == cached and cached.endswith("-" + "k" * 64)
    script = args[-1]
    assert "pip install" not in script  # nothing is compiled
    assert (
        script.splitlines()[1] == "sha256sum -c --quiet /workspace/.turbo-build/complete || exit 86"
    )
    assert "sha256sum -c --quiet /workspace/.turbo-build/products.sha256 || exit 86" in script
    assert script.endswith("rm -rf /workspace/target\nmv /workspace/incoming /workspace/target")


def test_a_job_on_a_built_role_runs_its_image_with_nothing_over_the_tree(tmp_path: Path) -> None:
    from runner.executors.base import BuiltRole

    built = BuiltRole(
        "incumbent",
        tmp_path / "wt",
        "hit",
        "",
        tmp_path / "l",
        1.0,
        image="turbo-campaign-build/c1:r2-incumbent-9",
    )
    job = make_job(tmp_path, built=built)
    args = da.docker_create_args(job, "rocm:1", None, name="ctr", campaign="c1", caches=False)
    assert args == [
        "docker",
        "create",
        "--name",
        "ctr",
        *COMMON,
        *labels(job),
        *confine(job, True),
        *HOME,
        *SOURCE_ENV,
        "turbo-campaign-build/c1:r2-incumbent-9",
        "sh",
        "-c",
        SCRIPT,
    ]
    assert not any(a.endswith("target=/workspace/target,readonly") for a in args)


def test_a_serving_worker_on_a_gpu_gets_its_host_device_s_preparation_lock(
    tmp_path: Path,
) -> None:
    """A serving job's container differs from a pass's by its open stdin, the serve
    command and, on a GPU, its physical device's preparation lock: the file of the host
    GPU it was leased (a local worker on that GPU locks the same file), mounted
    read-only and named to the worker, though inside the GPU is device 0."""
    executor = leased_executor("nvidia")
    job = make_job(tmp_path, env={"CUDA_VISIBLE_DEVICES": "3"}, gpus=(3,))
    passes = executor.create_args(job, "ctr")
    serving = executor.create_args(job, "ctr", serving=True)
    lock = lock_path(lease_dir(), "3")
    assert lock.name == "gpu-3.lock"
    mount = serving.index(f"type=bind,source={lock},target=/workspace/prepare.lock,readonly")
    named = serving.index("TURBO_CAMPAIGN_PREPARE_LOCK=/workspace/prepare.lock")
    assert serving[mount - 1] == "--mount" and serving[named - 1] == "-e"
    added = {mount - 1, mount, named - 1, named, serving.index("--interactive")}
    assert [a for k, a in enumerate(serving) if k not in added][:-1] == passes[:-1]
    assert serving[-1] == SCRIPT.replace("runner.worker", "runner.worker --serve")
    # no lock on the CPU: the worker takes none there
    cpu = make_job(tmp_path)
    cpu_args = dx.DockerExecutor("img", gpu=None, campaign="c1").create_args(cpu, "c", serving=True)
    assert not any("prepare.lock" in a for a in cpu_args)
