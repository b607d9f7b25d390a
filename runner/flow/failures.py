"""``RoundFailed``: a round's measurement did not complete (a worker crashed, a build
or the focused test could not run).  A VALIDATE round is then recorded as FAILED
and nothing else changes; at the baseline it stops the command.  In a module of its
own, below every flow that raises or catches it (builds, measurement, rounds,
acceptance, reproduction), so none of them imports another for it.
"""

from __future__ import annotations

from pathlib import Path

from runner.core.errors import InfrastructureError
from runner.judge.import_cause import explain_failure


class RoundFailed(InfrastructureError):
    """A worker crashed: a VALIDATE round is recorded as FAILED and nothing else
    changes; at the baseline it stops the command (nothing is recorded)."""

    def __init__(self, message: str, log_path: Path | None = None) -> None:
        tail = ""
        if log_path and log_path.exists():
            text = log_path.read_text(encoding="utf-8", errors="replace")
            tail = explain_failure(text[-1500:], text)
        super().__init__(message + (f"\n{tail}" if tail else ""))
        self.message = message
        self.log_path = log_path  # the failed job's log (its folder names the job)
