"""What a killed command leaves behind, how ``campaign status`` names it, and how the
next command of the same campaign clears it (docs/reliability.md).

A round works in a temporary folder (``/tmp/turbo-campaign-job-<campaign>-XXXXXXXX``)
and in git worktrees of the target (``/tmp/turbo-campaign-wt-<campaign>-XXXXXXXX``);
each holds an ``owner.json`` (campaign, campaign root or target source, pid).  Its
workers run in their own process groups with the parent-death signal, and docker
containers carry the labels ``turbo-campaign.campaign`` and ``turbo-campaign.pid``.
A round notes each step it reaches in ``rounds/round-N/.attempt.json`` so that an
unclosed round says where it stopped.

After a ``kill -9`` the next command that holds the campaign lock (baseline, validate,
accept, report) calls ``clean_leftovers``: a leftover that belongs to this campaign and
to another process is stale by definition (the lock is ours), so stale workers and
containers are killed, the folders removed, the worktrees unregistered
(``git worktree remove`` + ``prune``) and the temporary files of interrupted atomic
writes deleted.  ``campaign status`` only reports them.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from runner.core.errors import CommandFailed
from runner.core.files import write_atomic
from runner.core.processes import pid_alive, run
from runner.core.timestamps import now_second

JOB_PREFIX = "turbo-campaign-job-"
WORKTREE_PREFIX = "turbo-campaign-wt-"
OWNER = "owner.json"
ATTEMPT = ".attempt.json"
CAMPAIGN_LABEL = "turbo-campaign.campaign"
PID_LABEL = "turbo-campaign.pid"
_RANDOM = re.compile(r"[a-z0-9_]{8}")  # the random part of a mkdtemp name
# write_atomic's temporary files (``.<name>.<random>.tmp``) and a staged artifacts dir
_PARTIAL = re.compile(r"^\..+\.[a-z0-9_]{8}\.tmp$")
PARTIAL_ARTIFACTS = ".artifacts.partial"


# Slurm jobs carry the same two facts in their --comment
COMMENT_PREFIX = "turbo-campaign"


def job_comment(campaign: str, pid: int) -> str:
    """The ``--comment`` of a campaign's jobs: ``turbo-campaign:<campaign>:<pid>``."""
    return f"{COMMENT_PREFIX}:{campaign}:{pid}"


def parse_job_comment(comment: str) -> tuple[str, int] | None:
    """(campaign, pid) of a ``job_comment``; None for anybody else's job."""
    prefix, _, rest = comment.strip().partition(":")
    campaign, _, pid = rest.rpartition(":")
    if prefix != COMMENT_PREFIX or not campaign or not pid.isdigit():
        return None
    return campaign, int(pid)


def temp_root() -> Path:
    return Path(tempfile.gettempdir())


def _ours(name: str, prefix: str) -> bool:
    return name.startswith(prefix) and bool(_RANDOM.fullmatch(name[len(prefix) :]))


class OwnerRecord(TypedDict, total=False):
    """``owner.json`` of a folder a command made (``make_owned_dir``)."""

    root: str
    campaign: str
    source: str
    pid: int


def _read_owner(folder: Path) -> OwnerRecord:
    try:
        data: OwnerRecord = json.loads((folder / OWNER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# ---- the folders a round works in -------------------------------------------------
def make_owned_dir(prefix: str, owner: Mapping[str, object]) -> Path:
    """``mkdtemp(prefix)`` with ``owner.json`` (plus this pid) inside."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    write_atomic(folder / OWNER, json.dumps({**owner, "pid": os.getpid()}) + "\n")
    return folder


@contextlib.contextmanager
def job_dir(campaign_root: Path, name: str) -> Iterator[Path]:
    """The round's temporary folder; removed afterwards (or by the next command)."""
    folder = make_owned_dir(f"{JOB_PREFIX}{name}-", {"root": str(campaign_root)})
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _job_dirs(campaign_root: Path, name: str) -> list[tuple[Path, int]]:
    found = []
    root = str(campaign_root)
    for p in temp_root().glob(f"{JOB_PREFIX}{name}-*"):
        owner = _read_owner(p)
        if p.is_dir() and _ours(p.name, f"{JOB_PREFIX}{name}-") and owner.get("root") == root:
            found.append((p, int(owner.get("pid") or 0)))
    return sorted(found)


def _worktree_dirs(source: Path, name: str) -> list[tuple[Path, int]]:
    found = []
    for p in temp_root().glob(f"{WORKTREE_PREFIX}{name}-*"):
        owner = _read_owner(p)
        if (
            p.is_dir()
            and _ours(p.name, f"{WORKTREE_PREFIX}{name}-")
            and owner.get("campaign") == name
            and owner.get("source") == str(source)
        ):
            found.append((p, int(owner.get("pid") or 0)))
    return sorted(found)


# ---- round attempts -----------------------------------------------------------------
def note_step(round_dir: Path, step: str) -> None:
    """Record that the round in ``round_dir`` reached ``step`` (for ``status``)."""
    path = round_dir / ATTEMPT
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    started = old.get("started") if old.get("pid") == os.getpid() else None
    now = now_second()
    record = {"pid": os.getpid(), "step": step, "at": now, "started": started or now}
    write_atomic(path, json.dumps(record) + "\n")


def describe_attempt(round_dir: Path) -> str:
    """Where an unclosed round stopped, in words."""
    try:
        data = json.loads((round_dir / ATTEMPT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "no step recorded (it stopped before its first step)"
    pid = int(data.get("pid") or 0)
    alive = "still running" if pid_alive(pid) else "no longer running: killed or crashed"
    return (
        f"last step '{data.get('step')}' at {data.get('at')} (started {data.get('started')}, "
        f"pid {pid} {alive})"
    )


# ---- workers and containers -------------------------------------------------------
@dataclass(frozen=True)
class StaleWorker:
    kind: str  # "process", "container" or "slurm"
    ident: str  # pid, container name or Slurm job id
    what: str

    def describe(self) -> str:
        return f"{self.kind} {self.ident} ({self.what})"


def _cmdline(pid: int) -> list[str]:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0") if a]


def _worker_processes(campaign_root: Path, name: str) -> list[tuple[int, str, int]]:
    """(pid, job, owner pid) of worker processes of this campaign's job folders."""
    folders = {str(p): owner for p, owner in _job_dirs(campaign_root, name)}
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        args = _cmdline(int(entry.name))
        if "runner.worker" not in args:
            continue
        for arg in args:
            for folder, owner in folders.items():
                if arg.startswith(folder + "/"):
                    found.append((int(entry.name), Path(arg).stem, owner))
    return found


def _listing(argv: list[str], timeout: float) -> list[str]:
    """The output lines of a listing command (``docker ps``, ``squeue``); none where the
    tool is not installed, fails or does not answer within ``timeout`` seconds."""
    if shutil.which(argv[0]) is None:
        return []
    try:
        proc = run(argv, check=False, timeout=timeout)
    except CommandFailed:
        return []
    return (proc.stdout or "").splitlines() if proc.returncode == 0 else []


def _containers(name: str) -> list[tuple[str, int]]:
    lines = _listing(
        [
            "docker",
            "ps",
            "-a",
            "--filter",
            f"label={CAMPAIGN_LABEL}={name}",
            "--format",
            f'{{{{.Names}}}} {{{{.Label "{PID_LABEL}"}}}}',
        ],
        timeout=20,
    )
    out = []
    for line in lines:
        parts = line.split()
        if parts:
            pid = parts[1] if len(parts) > 1 and parts[1].isdigit() else "0"
            out.append((parts[0], int(pid)))
    return out


def _slurm_jobs(name: str) -> list[tuple[str, int]]:
    """This campaign's Slurm jobs still queued or running (their ``--comment`` names the
    campaign and the submitting pid, ``job_comment``)."""
    # every command of a campaign asks: a short limit, as a host with Slurm's client but
    # no reachable controller would otherwise make each one wait
    out = []
    for line in _listing(["squeue", "-h", "-o", "%i|%k"], timeout=5):
        job_id, _, comment = line.partition("|")
        parsed = parse_job_comment(comment)
        if parsed and parsed[0] == name:
            out.append((job_id.strip(), parsed[1]))
    return out


def stale_workers(campaign_root: Path, name: str, *, locked: bool = False) -> list[StaleWorker]:
    """Workers and containers of this campaign whose campaign process is gone (with
    ``locked``: every one not started by this process)."""

    def stale(owner: int) -> bool:
        return owner != os.getpid() if locked else not pid_alive(owner)

    found = [
        StaleWorker("process", str(pid), f"worker {job}, its campaign process {owner} is gone")
        for pid, job, owner in _worker_processes(campaign_root, name)
        if stale(owner)
    ]
    found += [
        StaleWorker("container", ctr, f"docker container of campaign process {owner}, gone")
        for ctr, owner in _containers(name)
        if stale(owner)
    ]
    found += [
        StaleWorker("slurm", job, f"Slurm job of campaign process {owner}, gone")
        for job, owner in _slurm_jobs(name)
        if stale(owner)
    ]
    return found


# ---- partial files ----------------------------------------------------------------------
def partial_files(campaign_root: Path) -> list[Path]:
    """Temporary files of interrupted atomic writes, and staged artifacts folders."""
    found = []
    for dirpath, dirnames, filenames in os.walk(campaign_root):
        for d in list(dirnames):
            if d == PARTIAL_ARTIFACTS:
                found.append(Path(dirpath) / d)
                dirnames.remove(d)
        found += [Path(dirpath) / f for f in filenames if _PARTIAL.match(f)]
    return sorted(found)


# ---- report and clean ------------------------------------------------------------------
def describe_leftovers(campaign_root: Path, name: str, source: Path) -> list[str]:
    """Leftovers of dead processes of this campaign, one line each (nothing removed)."""
    lines = [f"stale worker: {w.describe()}" for w in stale_workers(campaign_root, name)]
    lines += [
        f"leftover folder: {p} (its process {pid} is gone)"
        for p, pid in _job_dirs(campaign_root, name) + _worktree_dirs(source, name)
        if not pid_alive(pid)
    ]
    lines += [f"partial file: {p}" for p in partial_files(campaign_root)]
    if lines:
        lines.append("the next baseline/validate/accept/report of this campaign removes them")
    return lines


def clean_leftovers(campaign_root: Path, name: str, source: Path) -> list[str]:
    """Under the campaign lock: kill stale workers and containers, remove temporary
    folders, worktrees and partial files of this campaign.  Returns what it did."""
    done = []
    for w in stale_workers(campaign_root, name, locked=True):
        if w.kind == "process":
            pid = int(w.ident)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if os.getpgid(pid) == pid:  # a worker leads its own group: kill it all
                    os.killpg(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        elif w.kind == "slurm":
            run(["scancel", w.ident], check=False, timeout=60)
        else:
            run(["docker", "rm", "--force", "--volumes", w.ident], check=False, timeout=60)
        done.append(f"killed stale {w.describe()}")
    for p, pid in _job_dirs(campaign_root, name):
        if pid != os.getpid():
            shutil.rmtree(p, ignore_errors=True)
            done.append(f"removed {p}")
    trees = [p for p, pid in _worktree_dirs(source, name) if pid != os.getpid()]
    for p in trees:
        if (source / ".git").exists():
            run(["git", "worktree", "remove", "--force", str(p / "src")], cwd=source, check=False)
        shutil.rmtree(p, ignore_errors=True)
        done.append(f"removed worktree {p / 'src'}")
    if trees and (source / ".git").exists():
        run(["git", "worktree", "prune"], cwd=source, check=False)
    for p in partial_files(campaign_root):
        if p.is_dir():
            shutil.rmtree(p, ignore_errors=True)
        else:
            p.unlink(missing_ok=True)
        done.append(f"removed partial {p}")
    return done
