"""A Ctrl-C that is never lost.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be.  Inside a
callback whose exceptions Python prints and drops, the interrupt is gone: the logging
module's fork handlers run around every subprocess start, and a SIGINT that arrived
while the round started its fourth worker was printed as "Exception ignored in:
<function _releaseLock>" and the round ran on to its end and recorded its verdict
(tests/test_rounds.py, the CI run of 2312e40, 2026-12-03).

``installed`` (around the CLI's entry point) makes SIGINT also set a flag; ``check`` raises
``KeyboardInterrupt`` once the flag is set.  The round calls it where it passes between
its steps, after each worker it starts and before each turn, so an interrupt that was
dropped is raised there, and the round stops recording nothing, as the CLI's
"interrupted" message promises (docs/reliability.md §4).  Leaving ``installed`` puts the
earlier handler back and forgets the flag, so an in-process caller (a test) that handled
its interrupt starts clean.  Without it (a library caller) ``check`` never raises.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

_SEEN = threading.Event()


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    _SEEN.set()
    raise KeyboardInterrupt


@contextmanager
def installed() -> Iterator[None]:
    """Within: SIGINT sets the flag and raises, in the main thread, where SIGINT has
    Python's default handler (a process started with SIGINT ignored, as a background
    job is, keeps ignoring it).  After: the earlier handler and a clear flag."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    earlier = signal.getsignal(signal.SIGINT)
    if earlier is signal.default_int_handler:
        _SEEN.clear()
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if earlier is signal.default_int_handler:
            signal.signal(signal.SIGINT, earlier)
            _SEEN.clear()


def check() -> None:
    """Raise ``KeyboardInterrupt`` if SIGINT came within ``installed``, also when the
    exception it raised then was dropped."""
    if _SEEN.is_set():
        raise KeyboardInterrupt
