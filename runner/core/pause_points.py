"""A documented debug hook: pause at a named step of a round.

With ``TURBO_CAMPAIGN_PAUSE_AT=<step>[,<step>...]`` in the environment, the process
that reaches one of those steps writes ``<step> <pid>`` to the file named by
``TURBO_CAMPAIGN_PAUSE_FILE`` (atomically), then sleeps ``TURBO_CAMPAIGN_PAUSE_S``
seconds (default 600) before it goes on.  It lets a test (or a person) stop a round
at an exact point and kill it there; ``tests/test_faults.py`` kills a round at every
step this way.  Without the variable a step costs one dictionary lookup.

Steps (docs/reliability.md lists them): ``candidate-tree`` (both worktrees exist),
``worker-test`` and ``worker-pass`` (inside the worker process, the focused test and a
measuring pass), ``artifacts`` (half of the artifacts copied), ``logs`` (optimize.md
appended, the trend row not yet), ``records`` (both logs appended, ``result.json`` not
yet written), ``commit`` (the lineage commit object made, the worktree still there)
and ``advance`` (the round closed, the lineage head not yet moved).

Worker side too: imports nothing outside the standard library.
"""

from __future__ import annotations

import os
import time

PAUSE_ENV = "TURBO_CAMPAIGN_PAUSE_AT"
PAUSE_FILE_ENV = "TURBO_CAMPAIGN_PAUSE_FILE"
PAUSE_SECONDS_ENV = "TURBO_CAMPAIGN_PAUSE_S"
ENV_NAMES = (PAUSE_ENV, PAUSE_FILE_ENV, PAUSE_SECONDS_ENV)


def pause_point(step: str) -> None:
    """Pause here when ``TURBO_CAMPAIGN_PAUSE_AT`` names ``step``."""
    wanted = os.environ.get(PAUSE_ENV)
    if not wanted or step not in (s.strip() for s in wanted.split(",")):
        return
    marker = os.environ.get(PAUSE_FILE_ENV)
    if marker:
        tmp = f"{marker}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(f"{step} {os.getpid()}\n")
        os.replace(tmp, marker)
    time.sleep(float(os.environ.get(PAUSE_SECONDS_ENV) or 600))
