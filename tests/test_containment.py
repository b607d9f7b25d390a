"""Untrusted candidates stay contained (docs/reliability.md), on the real daemon and the
CPU test image: a measuring container runs as an unprivileged user with no
capabilities and no-new-privileges, cannot write outside its out folder, cannot reach
the network and cannot see another job's files; and a container dies with its
campaign process (the reaper), which holds the GPU lease until the container is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from runner.executors.base import WorkerJob
from runner.executors.docker import DockerExecutor

pytestmark = pytest.mark.docker
ROOT = Path(__file__).resolve().parent.parent

PROBE = textwrap.dedent(
    """
    import errno, json, os, socket
    out = {}
    out["uid"] = os.getuid()
    status = open("/proc/self/status").read()
    field = lambda k: next(ln.split()[1] for ln in status.splitlines() if ln.startswith(k))
    out["cap_eff"] = field("CapEff:")
    out["no_new_privs"] = field("NoNewPrivs:")
    writes = {}
    for path in ["/workspace/target/x", "/workspace/x", "/etc/x", "/usr/x", "/opt/venv/x",
                 "/x", "/root/x", "/cache/x", "/out/../x"]:
        try:
            with open(path, "w") as fh:
                fh.write("escaped")
            writes[path] = "written"
        except OSError as exc:
            writes[path] = errno.errorcode.get(exc.errno, str(exc.errno))
    out["writes"] = writes
    with open("/tmp/scratch", "w") as fh:
        fh.write("scratch")
    out["scratch_ok"] = open("/tmp/scratch").read() == "scratch"
    with open("/out/mine.txt", "w") as fh:
        fh.write(os.environ.get("SECRET", ""))
    net = {}
    for host, port in [("1.1.1.1", 53), ("8.8.8.8", 443), ("172.17.0.1", 2375)]:
        try:
            socket.create_connection((host, port), timeout=3).close()
            net[host] = "connected"
        except OSError as exc:
            net[host] = type(exc).__name__
    out["net"] = net
    out["interfaces"] = sorted(os.listdir("/sys/class/net"))
    out["out_listing"] = sorted(os.listdir("/out"))
    out["tmp_listing"] = sorted(os.listdir("/tmp"))
    other = os.environ.get("OTHER_OUT", "")
    out["other_visible"] = bool(other) and os.path.exists(other)
    found = []
    for top in ["/workspace", "/out", "/tmp", "/cache", "/home", "/root", "/mnt", "/srv"]:
        for dirpath, _, files in os.walk(top):
            found += [os.path.join(dirpath, f) for f in files if f == "mine.txt"]
    out["mine_files"] = sorted(found)
    with open("/out/probe.json", "w") as fh:
        json.dump(out, fh)
    """
)


def _job(base: Path, name: str, env: dict[str, str]) -> WorkerJob:
    src, out = base / name / "src", base / name / "out"
    src.mkdir(parents=True)
    (src / "kernel.py").write_text("VALUE = 1\n")
    spec = base / name / "spec.json"
    spec.write_text("{}\n")
    return WorkerJob(name, spec, src, out, env=env)


def _docker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=False)


def test_a_candidate_is_contained(cpu_image: str, tmp_path: Path) -> None:
    campaign = f"contain-{uuid.uuid4().hex[:6]}"
    executor = DockerExecutor(
        cpu_image, gpu=None, campaign=campaign, command=("python3", "-c", PROBE)
    )
    first = _job(tmp_path, "job-a", {"SECRET": "secret-of-a"})
    assert executor.run_job(first).returncode == 0
    second = _job(tmp_path, "job-b", {"SECRET": "b", "OTHER_OUT": str(first.out_dir)})
    outcome = executor.run_job(second)
    assert outcome.returncode == 0, outcome.log_path.read_text()
    probe = json.loads((second.out_dir / "probe.json").read_text())
    # an unprivileged user, no capabilities, no privilege gain
    assert probe["uid"] != 0
    assert int(probe["cap_eff"], 16) == 0
    assert probe["no_new_privs"] == "1"
    # nothing written outside its out folder: a read-only root filesystem and source
    assert all(v != "written" for v in probe["writes"].values()), probe["writes"]
    assert probe["writes"]["/workspace/target/x"] == "EROFS"
    assert probe["writes"]["/etc/x"] in ("EROFS", "EACCES")
    assert probe["scratch_ok"]  # a private tmpfs for scratch, gone with the container
    assert (second.out_dir / "mine.txt").read_text() == "b"
    assert not (second.source_dir / "x").exists()
    assert sorted(p.name for p in (tmp_path / "job-b").iterdir()) == ["out", "spec.json", "src"]
    # no network: only the loopback interface, every connection fails
    assert probe["interfaces"] == ["lo"]
    assert all(v != "connected" for v in probe["net"].values()), probe["net"]
    # another job's files are not visible: its out folder, its scratch
    assert probe["other_visible"] is False
    assert probe["mine_files"] == ["/out/mine.txt"]
    assert probe["tmp_listing"] == ["scratch"]
    assert (first.out_dir / "mine.txt").read_text() == "secret-of-a"
    run_line = (second.out_dir / "docker_run.txt").read_text()
    for option in ("--cap-drop ALL", "no-new-privileges", "--read-only", "--pids-limit"):
        assert option in run_line


KILLED = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from runner.executors.base import WorkerJob
    from runner.executors.docker import DockerExecutor
    from runner.store.leases import acquire
    base, image, campaign, lease_dir = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    (base / "src").mkdir()
    (base / "spec.json").write_text("{}")
    job = WorkerJob("sleeper", base / "spec.json", base / "src", base / "out")
    with acquire([0], campaign, root=Path(lease_dir)):
        DockerExecutor(image, gpu=None, campaign=campaign, caches=False,
                       command=("sleep", "600")).run_job(job)
    """
)


def test_a_container_dies_with_its_campaign(cpu_image: str, tmp_path: Path) -> None:
    from runner.store.leases import list_leases

    campaign = f"reap-{uuid.uuid4().hex[:6]}"
    lease_dir = tmp_path / "leases"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    (tmp_path / "job").mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(tmp_path / "job"), cpu_image, campaign, str(lease_dir)],
        env=env,
        start_new_session=True,
    )
    label = f"label=turbo-campaign.campaign={campaign}"
    deadline = time.monotonic() + 300
    while not _docker("ps", "-q", "--filter", label, "--filter", "status=running").stdout.strip():
        assert proc.poll() is None, "the campaign process ended early"
        assert time.monotonic() < deadline, "the container never started"
        time.sleep(0.5)
    assert [info.held for info in list_leases(lease_dir)] == [True]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while _docker("ps", "-aq", "--filter", label).stdout.strip():
        assert time.monotonic() < deadline, "the container outlived its campaign"
        time.sleep(0.5)
    deadline = time.monotonic() + 30  # the reaper held the lease; it ends after removal
    while any(info.held for info in list_leases(lease_dir)):
        assert time.monotonic() < deadline, "the lease outlived the container"
        time.sleep(0.2)
