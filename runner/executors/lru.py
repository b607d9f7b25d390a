"""What the host's caches share: a size limit in GB from the environment, which
entries go when a cache is over it (the least recently used first, never one the
caller keeps), and the root's lock their writers and pruners take.  The build cache
(``runner.executors.build_cache``) and the roles' JIT cache folders
(``runner.executors.jit_cache``) both evict through ``over_limit`` under ``locked``."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Container, Iterator, Sequence
from pathlib import Path

from runner.core.errors import ConfigError


def size_limit(env: str, default_gb: float) -> int:
    """Bytes: the GB ``env`` names (0 keeps nothing unused), else ``default_gb``."""
    raw = os.environ.get(env, "")
    try:
        gb = float(raw) if raw else default_gb
    except ValueError:
        gb = -1.0
    if gb < 0:
        raise ConfigError(f"{env}={raw!r}: give the cache's size limit in GB, e.g. {default_gb:g}")
    return int(gb * (1 << 30))


def over_limit(sized: Sequence[tuple[str, int]], limit: int, keep: Container[str]) -> list[str]:
    """The names to remove, least recently used first, until the total is within
    ``limit``; ``sized`` is (name, bytes) most recently used first.  A name in ``keep``
    stays whatever it costs."""
    total = sum(size for _, size in sized)
    gone = []
    for name, size in reversed(sized):
        if total <= limit:
            break
        if name in keep:
            continue
        gone.append(name)
        total -= size
    return gone


@contextlib.contextmanager
def locked(root: Path) -> Iterator[None]:
    """Hold the cache ``root``'s lock (``root/.lock``, made with its folder if missing)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
