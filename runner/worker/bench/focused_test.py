"""The focused test of a tree, run by the worker in test mode
(``spec.mode == "test"``): the target's test command in the measured tree, its exit
code and output recorded in ``test.log`` and ``test.json``.  The command's ``python``
(and ``pytest``) is this interpreter started isolated (``write_shims``).

Imports neither torch nor pydantic: the command's own interpreter imports the target.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runner.core.artifact_names import FOCUSED_TEST
from runner.core.files import write_atomic, write_json_atomic
from runner.core.lifeline import child_preexec
from runner.core.pause_points import pause_point
from runner.core.spec import OUT_ENV, RoundSpec
from runner.core.startup import SYSPATH_ENV, isolated_command, syspath

# The exit code of a test job that found a judge file changed and ran nothing.
TAMPERED_EXIT = 87


def judge_changes(expect: dict[str, str], tree: Path) -> list[str]:
    """The paths of ``expect`` whose file in ``tree`` does not hold the sha256 named (or
    exists where "" says it must not)."""
    changed = []
    for rel, digest in sorted(expect.items()):
        path = tree / rel
        if path.is_symlink() or path.is_dir():
            changed.append(rel)
        elif not path.is_file():
            changed += [rel] if digest else []
        elif hashlib.sha256(path.read_bytes()).hexdigest() != digest:
            changed.append(rel)
    return changed


def _refuse(spec: RoundSpec, out_dir: Path, changed: list[str]) -> int:
    write_atomic(
        out_dir / "test.log",
        f"$ {spec.command}\nnot run: the judge file(s) {', '.join(changed)} differ from the "
        "lineage head's when the test was to start (rewritten after they were restored)\n",
    )
    record = {"command": spec.command, "returncode": TAMPERED_EXIT, "tampered": changed}
    write_json_atomic(out_dir / FOCUSED_TEST, record)
    return TAMPERED_EXIT


def write_shims(folder: Path) -> str:
    """``python``, ``python3`` and ``pytest`` in ``folder`` (first on the command's
    ``PATH``): this interpreter started isolated as a worker is
    (``runner.core.startup.isolated_command``: no ``site`` start-up, so no
    ``sitecustomize``/``usercustomize`` nor ``*.pth`` import line a candidate's earlier
    process wrote runs; ``sys.path`` explicit, the harness first).  Returns ``folder``."""
    start = shlex.join(isolated_command(sys.executable))
    for name, first in (("python", ""), ("python3", ""), ("pytest", " -m pytest")):
        path = folder / name
        write_atomic(path, f'#!/bin/sh\nexec {start}{first} "$@"\n')
        path.chmod(0o755)
    return str(folder)


def run_test(spec: RoundSpec, out_dir: Path) -> int:
    """Test mode: run the target's focused test command in the current directory (the
    measured tree) and record its exit code and output; refuse (``TAMPERED_EXIT``,
    ``tampered`` in test.json) when a file of ``spec.expect`` does not hold what it
    says."""
    changed = judge_changes(dict(spec.expect), Path.cwd())
    if changed:
        return _refuse(spec, out_dir, changed)
    command = spec.command
    env = dict(os.environ)  # "python" in the command is this interpreter
    # Files the command needs that live on the host (the quick script): written into
    # out_dir, which the command reaches as $TURBO_CAMPAIGN_OUT in any executor.
    files = spec.files
    assert isinstance(files, dict)
    for name, text in files.items():
        write_atomic(out_dir / Path(str(name)).name, str(text))
    env[OUT_ENV] = str(out_dir.resolve())
    env[SYSPATH_ENV] = env.get(SYSPATH_ENV) or syspath(
        Path(__file__).resolve().parents[3],  # the harness root, which holds runner/
        [*env.get("PYTHONPATH", "").split(os.pathsep), Path.cwd()],
    )
    pause_point("worker-test")
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="isolated-python-") as shims:
        env["PATH"] = os.pathsep.join(
            [write_shims(Path(shims)), str(Path(sys.executable).parent), env.get("PATH", "")]
        )
        proc = subprocess.run(  # the command dies with this worker (parent-death signal)
            command,
            shell=True,
            preexec_fn=child_preexec(),
            text=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            check=False,
            env=env,
        )
    write_atomic(out_dir / "test.log", f"$ {command}\n{proc.stdout}")
    write_json_atomic(
        out_dir / FOCUSED_TEST,
        {
            "command": command,
            "returncode": proc.returncode,
            "seconds": round(time.perf_counter() - t0, 3),
            "threads": os.environ.get("OMP_NUM_THREADS"),  # its share, side by side
        },
    )
    return proc.returncode
