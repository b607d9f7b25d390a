"""What ``python -m runner.worker SPEC.json OUT_DIR`` runs (one pass, or the focused
test when the spec's ``mode`` is ``"test"``), and
``python -m runner.worker --serve SPEC.json OUT_DIR`` (a long-lived paired worker that
measures when the host hands it the device); ``runner/worker/__main__.py`` only calls
``run_and_leave``.

Runs inside the isolated environment (a fresh subprocess, container or Slurm task) and
speaks to the host only through the files it writes into OUT_DIR (and, serving, one
JSON line per message).  This module only reads the arguments, starts ``worker.log``,
refuses a tree other than the one the host named, and dispatches:

* a pass: ``runner.worker.bench.worker_pass.run_spec``;
* serving: ``runner.worker.bench.serve.serve`` over
  ``runner.worker.bench.worker_pass.load_for``;
* the focused test: ``runner.worker.bench.focused_test.run_test``, which imports no torch
  (the test command's own interpreter imports the target).

Never pydantic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import traceback
from pathlib import Path

from runner.core.artifact_names import WORKER_LOG
from runner.core.pause_points import pause_point
from runner.core.spec import SOURCE_ENV, RoundSpec, load_spec

log = logging.getLogger("runner.worker")


def check_source() -> None:
    """Refuse to measure anything but the tree the host asked for."""
    expected = os.environ.get(SOURCE_ENV)
    if expected and Path.cwd().resolve() != Path(expected).resolve():
        raise SystemExit(f"worker runs in {Path.cwd()}, expected {expected}")


def _identity(spec: RoundSpec) -> str:
    return json.dumps({k: spec.to_dict()[k] for k in ("round", "role", "pass_index")})


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    serving = bool(args) and args[0] == "--serve"
    if serving:
        args = args[1:]
    if len(args) != 2:
        print("usage: python -m runner.worker [--serve] SPEC.json OUT_DIR", file=sys.stderr)
        return 2
    out_dir = Path(args[1])
    out_dir.mkdir(parents=True, exist_ok=True)
    logging.basicConfig(
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(message)s",
        handlers=[logging.FileHandler(out_dir / WORKER_LOG), logging.StreamHandler(sys.stderr)],
    )
    spec = load_spec(Path(args[0]))
    check_source()
    if not serving and spec.mode == "test":
        from runner.worker.bench.focused_test import run_test

        return run_test(spec, out_dir)
    from runner.worker.bench.worker_pass import load_for, run_spec

    if serving:
        from runner.worker.bench.serve import serve

        log.info("worker (serving): %s", _identity(spec))
        pause_point("worker-pass")
        return serve(spec, out_dir, load_for)
    log.info("worker: %s", _identity(spec))
    pause_point("worker-pass")
    return run_spec(spec, out_dir)


def leave(code: int) -> None:
    """Exit with ``code`` without running any exit hook (``os._exit``): the last reply
    and the proof files are written, the logs flushed, and nothing the measured code
    registered (``atexit``, finalizers) runs after the harness's last check."""
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)


def run_and_leave() -> None:
    """``main``, then ``leave`` with its code, also when it raised (the traceback on
    stderr, exit 1; a ``SystemExit`` keeps its code, its message printed)."""
    try:
        code = main()
    except SystemExit as exc:
        if isinstance(exc.code, int) or exc.code is None:
            code = exc.code or 0
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:  # every exit goes through leave: no exit hook may run
        traceback.print_exc()
        code = 1
    leave(code)
