"""The first real cause of a failed import in a test log.

A package whose compiled extension is missing fails to import; a test harness that then
falls back to another import (Primus-Turbo's conftest tries ``primus_turbo.jax`` after
``primus_turbo.pytorch`` fails) ends the traceback with the fallback's error, e.g.
``No module named 'jax'``.  The first ImportError/ModuleNotFoundError printed in a
chained traceback is the one that started it ("During handling of the above exception,
another exception occurred" follows it), so that is the one to show.
"""

from __future__ import annotations

import re

# a traceback's exception line, after pytest's "E   " or "INTERNALERROR> " prefixes
_IMPORT_ERROR = re.compile(
    r"^(?:INTERNALERROR>\s*|E\s+)?((?:ModuleNotFoundError|ImportError): .+?)\s*$", re.M
)


def first_import_cause(log: str) -> str | None:
    """``"ModuleNotFoundError: No module named '...'"`` for the first import error in
    ``log``; None when the log shows none."""
    m = _IMPORT_ERROR.search(log)
    return m.group(1) if m else None


def explain_failure(log_tail: str, full_log: str) -> str:
    """The failure text to show: the log tail, headed by the first import error when
    the full log has one that the tail does not start with."""
    cause = first_import_cause(full_log)
    if cause is None:
        return log_tail
    last = _IMPORT_ERROR.findall(full_log)[-1]
    head = f"first cause: {cause}"
    if last != cause:
        head += f" (the traceback ends in a later error: {last})"
    return f"{head}\n{log_tail}"
