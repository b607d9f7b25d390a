"""The stdio wire of ``campaign mcp``, bounded: each line a client sends is read up to
``runner.core.limits.MAX_MCP_MESSAGE_BYTES``; a line that is not JSON gets a JSON-RPC
parse error (-32700), one too long or not a JSON-RPC object an invalid-request error
(-32600), and the server keeps serving (the SDK's own reader dropped them without a
reply, so a client waited for ever).  As the SDK's transport does, the wire is moved
off file descriptors 0 and 1 while serving: children read EOF and their output goes to
stderr, never into the protocol."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import AsyncIterator

import anyio
import anyio.to_thread

from runner.core.limits import MAX_MCP_MESSAGE_BYTES

PARSE_ERROR = -32700
INVALID_REQUEST = -32600


class Wire:
    """The protocol's stdin and stdout on private descriptors; ``restore`` puts them back."""

    def __init__(self) -> None:
        self.in_fd, self.out_fd = os.dup(0), os.dup(1)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        os.dup2(2, 1)
        self.reader = os.fdopen(self.in_fd, "rb", closefd=False)
        self.lock = threading.Lock()

    def restore(self) -> None:
        os.dup2(self.in_fd, 0)
        os.dup2(self.out_fd, 1)
        os.close(self.in_fd)
        os.close(self.out_fd)

    def send(self, text: str) -> None:
        """Write one whole frame (never interleaved with another)."""
        data = text.encode("utf-8")
        with self.lock:
            while data:
                data = data[os.write(self.out_fd, data) :]

    def next_message(self) -> str | None:
        """The next line that is a JSON-RPC object (None at the end of input); the others
        are answered with an error here."""
        while True:
            raw = self.reader.readline(MAX_MCP_MESSAGE_BYTES + 1)
            if not raw:
                return None
            if len(raw) > MAX_MCP_MESSAGE_BYTES and not raw.endswith(b"\n"):
                while (rest := self.reader.readline(1 << 16)) and not rest.endswith(b"\n"):
                    pass  # the rest of the over-long line
            message, reply = checked(raw)
            if reply is not None:
                self.send(json.dumps(reply) + "\n")
            if message is not None:
                return message


def _error(code: int, message: str, request_id: str | int | None = None) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": message}}


def checked(raw: bytes) -> tuple[str | None, dict[str, object] | None]:
    """One line a client sent: (the message to serve, None), or (None, the JSON-RPC
    error to answer it with), or (None, None) for a blank line."""
    if not raw.strip():
        return None, None
    if len(raw) > MAX_MCP_MESSAGE_BYTES:
        too_long = f"Invalid Request: a message over {MAX_MCP_MESSAGE_BYTES} bytes; send less"
        return None, _error(INVALID_REQUEST, too_long)
    try:
        text = raw.decode("utf-8")
        value = json.loads(text)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None, _error(PARSE_ERROR, "Parse error: the line is not JSON (one message a line)")
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        rid = value.get("id") if isinstance(value, dict) else None
        ok_id = rid if isinstance(rid, (str, int)) and not isinstance(rid, bool) else None
        return None, _error(INVALID_REQUEST, "Invalid Request: not a JSON-RPC 2.0 object", ok_id)
    return text, None


class Lines:
    """What the SDK reads as stdin: the wire's checked messages."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    def __aiter__(self) -> AsyncIterator[str]:
        return self._lines()

    async def _lines(self) -> AsyncIterator[str]:
        while True:
            line = await anyio.to_thread.run_sync(self.wire.next_message, abandon_on_cancel=True)
            if line is None:
                return
            yield line


class Frames:
    """What the SDK writes as stdout: whole frames on the wire."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire

    async def write(self, text: str) -> None:
        await anyio.to_thread.run_sync(self.wire.send, text)

    async def flush(self) -> None:
        return None


__all__ = ["INVALID_REQUEST", "PARSE_ERROR", "Frames", "Lines", "Wire", "checked"]
