"""Atomic file writes: the one writer every record, spec and CSV goes through.

Standard library only, so the worker side (no pydantic) can use it too.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, content: str | bytes) -> None:
    """Replace ``path`` with ``content``: a temporary file in the same folder, fsync,
    rename over the old file, fsync the folder.  A reader sees the old file or the new
    one, never half of either.  ``str`` content is written as UTF-8, unchanged (no
    newline translation)."""
    path = Path(path)
    data = content.encode("utf-8") if isinstance(content, str) else content
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON (keys in their order, a final newline), atomically."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)
