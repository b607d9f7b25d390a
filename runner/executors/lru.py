"""What the host's caches share: a size limit in GB from the environment, and which
entries go when a cache is over it (the least recently used first, never one the
caller keeps).  The build cache (``runner.executors.build_cache``) and the roles' JIT
cache folders (``runner.executors.jit_cache``) both evict through ``over_limit``."""

from __future__ import annotations

import os
from collections.abc import Container, Sequence

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
