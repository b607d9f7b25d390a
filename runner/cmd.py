"""Every subprocess of the runner goes through ``run``: it logs the command and raises
a typed ``CommandFailed`` with the output tail when the command fails."""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from runner.errors import CommandFailed, InfrastructureError

log = logging.getLogger("runner.cmd")


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    check: bool = True,
    capture: bool = True,
    timeout: float | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` and return the completed process (stdout and stderr merged when
    captured).  ``env`` replaces the environment entirely when given."""
    args = [os.fspath(c) for c in cmd]
    log.debug("+ %s (cwd=%s)", shlex.join(args), cwd or Path.cwd())
    try:
        proc = subprocess.run(
            args,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            text=True,
            input=input_text,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.STDOUT if capture else None,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as exc:
        raise InfrastructureError(
            f"cannot run {args[0]!r}: not found on PATH; install it or fix PATH"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        out = exc.output if isinstance(exc.output, str) else ""
        raise CommandFailed(args, -1, f"timed out after {timeout} s\n{out}") from exc
    if check and proc.returncode != 0:
        raise CommandFailed(args, proc.returncode, proc.stdout or "")
    return proc


def start(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    stderr_path: Path,
) -> subprocess.Popen[bytes]:
    """Start a long-lived process that talks over its stdin/stdout (binary pipes) and
    writes its stderr to ``stderr_path``.  Every long-lived worker is spawned here, so
    a setting that must hold for all of them (process group, parent-death signal) has
    one place to go."""
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
            )
    except FileNotFoundError as exc:
        raise InfrastructureError(
            f"cannot run {args[0]!r}: not found on PATH; install it or fix PATH"
        ) from exc
