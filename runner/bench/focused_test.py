"""The focused test of a tree, run by the worker in test mode
(``spec.mode == "test"``): the target's test command in the measured tree, its exit
code and output recorded in ``test.log`` and ``test.json``.

Imports neither torch nor pydantic: the command's own interpreter imports the target.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from runner.core.files import write_atomic, write_json_atomic
from runner.core.lifeline import child_preexec
from runner.core.pause_points import pause_point
from runner.core.spec import OUT_ENV, RoundSpec


def run_test(spec: RoundSpec, out_dir: Path) -> int:
    """Test mode: run the target's focused test command in the current directory (the
    measured tree) and record its exit code and output."""
    command = spec.command
    env = dict(os.environ)  # "python" in the command is this interpreter
    # Files the command needs that live on the host (the quick script): written into
    # out_dir, which the command reaches as $TURBO_CAMPAIGN_OUT in any executor.
    files = spec.files
    assert isinstance(files, dict)
    for name, text in files.items():
        write_atomic(out_dir / Path(str(name)).name, str(text))
    env[OUT_ENV] = str(out_dir.resolve())
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    pause_point("worker-test")
    t0 = time.perf_counter()
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
        out_dir / "test.json",
        {
            "command": command,
            "returncode": proc.returncode,
            "seconds": round(time.perf_counter() - t0, 3),
        },
    )
    return proc.returncode
