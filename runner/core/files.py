"""Atomic file writes (the one writer every record, spec and CSV goes through), the one
sha256 reader of files and streams, bounded
reads of user input (a size and a line-length limit, checked before the file is read
whole), the copy of a scratch folder into the records that takes plain files only, and
the in-place write of a kernel control file (a cgroup's).

Standard library only, so the worker side (no pydantic) can use it too.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from runner.core.errors import ConfigError

_CHUNK = 1 << 20  # a hashed stream is read a MiB at a time


def sha256_stream(stream: IO[bytes] | None, out: IO[bytes] | None = None) -> str:
    """The sha256 (hex) of what ``stream`` holds from here to its end (``None``: of
    nothing), copying each chunk to ``out`` when given."""
    digest = hashlib.sha256()
    while stream is not None and (chunk := stream.read(_CHUNK)):
        digest.update(chunk)
        if out is not None:
            out.write(chunk)
    return digest.hexdigest()


def sha256_file(path: Path) -> str:
    """The sha256 (hex) of the file ``path``, read in chunks."""
    with Path(path).open("rb") as fh:
        return sha256_stream(fh)


def blob_hash(data: bytes) -> str:
    """The git blob id of ``data`` (what ``git hash-object`` prints for it)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


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


def write_json_atomic(path: Path, data: Mapping[str, object]) -> None:
    """``data`` as indented JSON (keys in their order, a final newline), atomically."""
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def write_control(path: str | bytes | os.PathLike[str], value: bytes) -> None:
    """Write ``value`` into a kernel control file (a cgroup's ``cgroup.procs``,
    ``cgroup.kill``) in place with one ``os.write``: a kernel interface, never a record,
    so never through a temporary file.  Safe in a forked child before ``exec``
    (``runner.core.lifeline.child_preexec``)."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value)
    finally:
        os.close(fd)


def read_json(path: Path) -> object | None:
    """The JSON value in ``path``; None when the file is missing, unreadable or not JSON
    (a record a process may not have left, read by whoever checks it)."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def copy_plain_tree(src: Path, dest: Path) -> None:
    """Copy the regular files and folders under ``src`` into ``dest`` (merged into what
    is there), skipping symbolic links, FIFOs, sockets and devices.  The pass folders
    copied into a round's records are written by the candidate's own code: a link
    there would pull any file of the host into the records (a folder link, the whole
    tree under it), and a FIFO, or a link to /dev/zero, would hang the copy."""

    def not_plain(folder: str, names: list[str]) -> list[str]:
        paths = ((name, Path(folder) / name) for name in names)
        return [n for n, p in paths if p.is_symlink() or not (p.is_file() or p.is_dir())]

    if src.is_symlink() or not src.is_dir():
        return
    shutil.copytree(src, dest, symlinks=True, ignore=not_plain, dirs_exist_ok=True)


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


def check_regular_file(path: Path, what: str) -> None:
    """ConfigError unless ``path`` is (or links to) a regular file; never blocks."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the {what} ({exc.strerror or exc}); check the path"
        ) from None
    if not stat.S_ISREG(mode):
        kind = "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
        raise ConfigError(
            f"{path} is {kind}; a {what} is read from a regular file: write it to a file "
            "first and pass that file"
        )


def read_bounded(path: Path, what: str, *, max_bytes: int, max_line: int) -> bytes:
    """The bytes of ``path`` (``what`` names it in messages: "benchmark CSV"), refused
    with ConfigError (exit 2) when it is over ``max_bytes`` or holds a line over
    ``max_line`` bytes.  The size is checked before reading, and at most
    ``max_bytes + 1`` bytes are ever read (a file whose size lies, such as a device,
    stays bounded).  Anything but a regular file (a FIFO, a device, a socket) is refused
    before it is opened: opening a FIFO waits for a writer, for ever.  Messages never
    echo the content."""
    check_regular_file(path, what)
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size <= max_bytes:
                data = fh.read(max_bytes + 1)
                size = len(data)
    except OSError as exc:
        raise ConfigError(
            f"{path}: cannot read the {what} ({exc.strerror or exc}); check the path"
        ) from None
    if size > max_bytes:
        raise ConfigError(
            f"{path}: {size} bytes or more, over the {max_bytes >> 20} MiB a {what} may be; "
            f"this is not a {what}: check the path (or what wrote the file)"
        )
    _check_lines(path, what, data, max_line)
    return data


def _check_lines(path: Path, what: str, data: bytes, max_line: int) -> None:
    """ConfigError naming the first line of ``data`` longer than ``max_line`` bytes."""
    start, lineno = 0, 1
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > max_line:
            raise ConfigError(
                f"{path}:{lineno}: a line of {end - start} bytes, over the {max_line} bytes "
                f"a line of a {what} may be; this is not a {what}: check the path (or what "
                "wrote the file)"
            )
        start, lineno = end + 1, lineno + 1
