"""GPU leases: real processes (spawned), real flocks, a real SIGKILL."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from runner.core.errors import ConfigError, GpuBusy
from runner.store.leases import (
    LEASE_DIR_ENV,
    acquire,
    lease_dir,
    list_leases,
    lock_path,
    parse_gpus,
)

CTX = mp.get_context("spawn")  # no fork of a threaded pytest process


def hold(root: str, gpus: list[int], campaign: str, ready: Any, release: Any) -> None:
    """Child: lease ``gpus`` and hold them until ``release`` is set."""
    with acquire(gpus, campaign, round=7, root=Path(root)):
        ready.set()
        release.wait(60)


def contend(root: str, rounds: int, violations: str) -> None:
    """Child: lease GPU 0 repeatedly; inside, claim a marker file exclusively."""
    marker = Path(root) / "inside"
    for _ in range(rounds):
        with acquire([0], f"c{os.getpid()}", wait=30, root=Path(root)):
            try:
                fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                with open(violations, "a") as fh:
                    fh.write(f"{os.getpid()}\n")
                continue
            os.close(fd)
            time.sleep(0.002)
            marker.unlink()


def _holder(root: Path, gpus: list[int], campaign: str = "other") -> tuple[Any, Any, Any]:
    ready, release = CTX.Event(), CTX.Event()
    proc = CTX.Process(target=hold, args=(str(root), gpus, campaign, ready, release))
    proc.start()
    assert ready.wait(60), "the holder process did not take its lease"
    return proc, ready, release


def test_acquire_records_the_holder_and_release_frees(tmp_path: Path) -> None:
    with acquire([1, 0], "camp-a", round=3, root=tmp_path) as lease:
        assert lease.gpus == (1, 0) and lease.held
        infos = {i.gpu: i for i in list_leases(tmp_path)}
        assert infos[0].held and infos[1].held
        assert (infos[0].campaign, infos[0].pid, infos[0].round) == ("camp-a", os.getpid(), 3)
        assert "leased by camp-a" in infos[1].describe()
    assert [i.held for i in list_leases(tmp_path)] == [False, False]
    assert lock_path(0, tmp_path).read_text() == ""  # emptied on release
    lease.release()  # twice is fine


def test_same_process_cannot_lease_a_gpu_twice(tmp_path: Path) -> None:
    with acquire([0], "a", root=tmp_path), pytest.raises(GpuBusy, match="leased by a"):
        acquire([0], "b", root=tmp_path)


def test_busy_gpu_names_the_holder_and_nothing_is_taken(tmp_path: Path) -> None:
    proc, _, release = _holder(tmp_path, [0], "gemm_fp8_round7")
    try:
        with pytest.raises(GpuBusy) as err:
            acquire([1, 0], "mine", root=tmp_path)
        message = str(err.value)
        assert f"GPU 0: leased by gemm_fp8_round7 (pid {proc.pid}, round 7" in message
        assert "--gpus" in message and "campaign status" in message
        assert isinstance(err.value, ConfigError)
        held = {i.gpu: i.held for i in list_leases(tmp_path)}
        assert held == {0: True, 1: False}  # all-or-nothing: GPU 1 was given back
    finally:
        release.set()
        proc.join(30)


def test_wait_takes_the_gpu_once_the_holder_releases(tmp_path: Path) -> None:
    proc, _, release = _holder(tmp_path, [2])
    try:
        timer = CTX.Process(target=_set_later, args=(release, 0.5))
        timer.start()
        t0 = time.monotonic()
        with acquire([2], "mine", wait=30, root=tmp_path):
            assert time.monotonic() - t0 >= 0.3
        timer.join(30)
    finally:
        release.set()
        proc.join(30)


def _set_later(event: Any, delay: float) -> None:
    time.sleep(delay)
    event.set()


def test_a_sigkilled_holder_frees_its_lease(tmp_path: Path) -> None:
    proc, _, _ = _holder(tmp_path, [0, 3], "crashy")
    assert [i.held for i in list_leases(tmp_path)] == [True, True]
    os.kill(proc.pid, signal.SIGKILL)
    proc.join(30)
    assert proc.exitcode == -signal.SIGKILL
    assert "crashy" in lock_path(0, tmp_path).read_text()  # stale text stays...
    assert [i.held for i in list_leases(tmp_path)] == [False, False]  # ...but shows free
    assert list_leases(tmp_path)[0].describe() == "GPU 0: free"
    with acquire([0, 3], "next", root=tmp_path):
        assert "next" in lock_path(3, tmp_path).read_text()


def test_processes_never_hold_the_same_gpu(tmp_path: Path) -> None:
    violations = tmp_path / "violations.txt"
    procs = [
        CTX.Process(target=contend, args=(str(tmp_path), 25, str(violations))) for _ in range(4)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert not violations.exists(), violations.read_text()


def test_lease_dir_from_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv(LEASE_DIR_ENV, str(tmp_path / "leases"))
    assert lease_dir() == tmp_path / "leases"
    assert list_leases() == []
    with acquire([5], "env"):
        assert [i.gpu for i in list_leases()] == [5]
    monkeypatch.delenv(LEASE_DIR_ENV)
    assert lease_dir() == Path("/tmp/turbo-campaign-leases")


def test_parse_gpus() -> None:
    assert parse_gpus("0,1") == [0, 1] and parse_gpus(" 3 ") == [3]
    for bad in ("", "a", "0,0", "-1"):
        with pytest.raises(ConfigError, match="--gpus"):
            parse_gpus(bad)
    with pytest.raises(ConfigError):
        acquire([], "x")
