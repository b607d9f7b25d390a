"""Every subprocess of the runner goes through ``run``: it logs the command and raises
a typed ``CommandFailed`` with the output tail when the command fails.

``die_with_parent`` (workers): the child gets its own process group and the Linux
parent-death signal, so a killed campaign leaves no worker behind, and a timeout or an
interrupt kills the child's whole group.  ``pass_fds`` hands open descriptors (the GPU
lease locks) to the child, so a lease stays held until the child has exited too.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.core.errors import CommandFailed, ConfigError, InfrastructureError
from runner.core.lifeline import child_preexec, kill_group

log = logging.getLogger("runner.core.processes")

# The tool's own git commits and tags are never signed: a user's ``commit.gpgsign`` or
# ``tag.gpgsign`` (with no key or agent at hand) would stop the lineage's commit, the
# demo's first commit or a workspace's, after the round was measured.
GIT_NO_SIGN = ("-c", "commit.gpgsign=false", "-c", "tag.gpgsign=false")
# The identity of a commit the tool makes in a repository of its own (an example copy,
# a workspace), where the user's identity may be unset; unsigned as above.
GIT_TOOL_COMMIT = (
    "-c",
    "user.name=turbo-campaign",
    "-c",
    "user.email=turbo-campaign@localhost",
    *GIT_NO_SIGN,
)


def _not_found(program: str, cwd: str | os.PathLike[str] | None) -> Exception:
    """What a FileNotFoundError from starting ``program`` means: the folder it was to
    run in is missing (a moved source, say), or the program is not installed."""
    if cwd is not None and not Path(cwd).is_dir():
        return ConfigError(
            f"cannot run {program!r} in {cwd}: that folder does not exist; check the path "
            "(for a campaign: the source: line of its manifest.yaml, or the folder it was "
            "moved to)"
        )
    return InfrastructureError(f"cannot run {program!r}: not found on PATH; install it or fix PATH")


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    capture: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
    die_with_parent: bool = False,
    pass_fds: Sequence[int] = (),
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` and return the completed process (stdout and stderr merged when
    captured).  ``env`` replaces the environment entirely when given."""
    args = [os.fspath(c) for c in cmd]
    log.debug("+ %s (cwd=%s)", shlex.join(args), cwd or Path.cwd())
    try:
        proc = subprocess.Popen(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            text=True,
            stdin=subprocess.PIPE if input_text is not None else None,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
            start_new_session=die_with_parent,
            preexec_fn=child_preexec() if die_with_parent else None,
            pass_fds=tuple(pass_fds),
        )
    except FileNotFoundError as exc:
        raise _not_found(args[0], cwd) from exc
    with proc:
        try:
            out, _ = proc.communicate(input_text, timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc, die_with_parent)
            out, _ = proc.communicate()
            raise CommandFailed(args, -1, f"timed out after {timeout} s\n{out or ''}") from None
        except BaseException:
            _stop(proc, die_with_parent)
            raise
    done = subprocess.CompletedProcess(args, proc.returncode, out, None)
    if check and done.returncode != 0:
        raise CommandFailed(args, done.returncode, done.stdout or "")
    return done


def _stop(proc: subprocess.Popen[str], group: bool) -> None:
    if group:
        kill_group(proc.pid)
    proc.kill()
    proc.wait()


def spawn(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    detach: bool = True,
) -> subprocess.Popen[str]:
    """Start ``cmd`` in the background with a pipe on its stdin (a watchdog such as the
    docker reaper: it learns that its parent died when the pipe closes).  ``detach``: a
    new session, so the watchdog outlives a kill of the caller's process group."""
    args = [os.fspath(c) for c in cmd]
    log.debug("+ %s &", shlex.join(args))
    try:
        return subprocess.Popen(
            args,
            env=dict(env) if env is not None else None,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=detach,
            pass_fds=tuple(pass_fds),
        )
    except FileNotFoundError as exc:
        raise InfrastructureError(
            f"cannot run {args[0]!r}: not found on PATH; install it or fix PATH"
        ) from exc


def start(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stderr_path: Path,
    pass_fds: Sequence[int] = (),
    cgroup_procs: Path | None = None,
) -> subprocess.Popen[bytes]:
    """Start a long-lived worker that talks over its stdin/stdout (binary pipes) and
    writes its stderr to ``stderr_path``.  Every long-lived worker is spawned here, with
    the same lifeline as ``run(die_with_parent=True)``: its own process group and the
    parent-death signal, so a killed campaign leaves none behind; ``pass_fds`` (the GPU
    lease locks) keep a lease held until the worker has exited too; ``cgroup_procs``:
    the worker joins that cgroup before it runs (``runner.core.cgroup``)."""
    args = [os.fspath(c) for c in cmd]
    log.debug("+ %s & (cwd=%s)", shlex.join(args), cwd or Path.cwd())
    try:
        with stderr_path.open("ab") as err:
            return subprocess.Popen(
                args,
                cwd=cwd,
                env=dict(env) if env is not None else None,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=err,
                start_new_session=True,
                preexec_fn=child_preexec(cgroup_procs),
                pass_fds=tuple(pass_fds),
            )
    except FileNotFoundError as exc:
        raise _not_found(args[0], cwd) from exc


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs (another user's counts; a zombie does not)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return _state(pid) != "Z"


def _state(pid: int) -> str:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return ""
    return stat.rpartition(")")[2].split()[0] if ")" in stat else ""
