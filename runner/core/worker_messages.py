"""The messages of a paired round's serving worker (``python -m runner.worker --serve``,
``runner.worker.bench.serve``) and its host (``runner.measure.paired``): one JSON object per line,
each kind a dataclass here, so both sides build and read them by attribute.

host -> worker (``Request``): ``Block`` (measure every shape once on member ``pick`` of
the buffer pool), ``Fresh`` (the fresh-step timing, a turn of its own), ``Finish`` (the
re-check after timing, then the artifacts, then exit).  On the wire each carries its
``op``: ``{"op": "block", "index": i, "pick": k}``.

worker -> host (``Reply``): ``Ready`` after set-up, ``BlockDone``, ``FreshDone``,
``Finished``, or ``Failed`` on any error.  On the wire a reply is named by its key:
``{"ok": true, "ready": [labels], "memory": {...}}`` (on a GPU with ``"shape_peaks":
{label: bytes}``), ``{"ok": true, "block": i,
"seconds": s, "start": t0, "end": t1, "memory": {...}, "timings": {label: [fwd_ms,
bwd_ms]}}``, ``{"ok": true, "fresh": true, "memory": {...}}``, ``{"ok": true,
"finished": true, "schema": name, "rows": [...], "samples": {...}}``,
``{"ok": false, "error": "..."}``.

The numbers the gate reads travel here, not through the worker's files: each block's
reply carries, per shape, the median of its forward and backward batches (``timings``),
and ``Finished`` the pass's CSV rows and ``samples.json``, which the host checks
against the turns it was told of and writes itself (``runner.measure.host_records``).

A memory report (``MemoryReport``) is empty on the CPU; on a GPU it holds ``reserved``
(the most device memory the process held since its last report), ``held`` (what it
keeps between turns) and the device's ``free`` and ``total`` (bytes).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

MemoryReport = dict[str, int]


class ProtocolError(ValueError):
    """A line that is not a message of this protocol."""


# -- host -> worker --------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """Measure every shape once (forward, backward) on member ``pick`` of the pool."""

    index: int
    pick: int = 0
    op: ClassVar[str] = "block"


@dataclass(frozen=True)
class Fresh:
    """Time the fresh step, the buffer pool freed first."""

    op: ClassVar[str] = "fresh"


@dataclass(frozen=True)
class Finish:
    """The re-check after timing, then the artifacts, then exit 0."""

    op: ClassVar[str] = "finish"


Request = Block | Fresh | Finish


def request_line(request: Request) -> str:
    """The wire form of ``request`` (no newline)."""
    fields = {"index": request.index, "pick": request.pick} if isinstance(request, Block) else {}
    return json.dumps({"op": request.op, **fields})


def parse_request(line: str) -> Request:
    """The request a line holds; ProtocolError for anything else."""
    data = _object(line)
    op = data.get("op")
    try:
        if op == Block.op:
            return Block(int(data["index"]), int(data.get("pick", 0)))
    except (KeyError, TypeError, ValueError):
        raise ProtocolError(f"a block request needs an integer index: {line.strip()!r}") from None
    if op == Fresh.op:
        return Fresh()
    if op == Finish.op:
        return Finish()
    raise ProtocolError(f"unknown request {line.strip()!r}")


# -- worker -> host --------------------------------------------------------------------
@dataclass(frozen=True)
class Ready:
    """Set up: the labels of the shapes it measures, and its preparation's memory; on a
    GPU, per shape the peak its preparation allocated (``shape_peaks``, bytes)."""

    ready: tuple[str, ...]
    memory: MemoryReport = field(default_factory=dict)
    shape_peaks: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class BlockDone:
    """One block measured: its wall-clock seconds and span, the memory since the last,
    and per shape label the block's forward and backward median (ms; None: no backward
    or the shape failed)."""

    block: int
    seconds: float
    start: float
    end: float
    memory: MemoryReport = field(default_factory=dict)
    timings: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)


@dataclass(frozen=True)
class FreshDone:
    """The fresh step timed; what the process keeps now, its pool handed back."""

    memory: MemoryReport = field(default_factory=dict)


@dataclass(frozen=True)
class Finished:
    """The re-checks done: the pass's CSV rows (pinned schema ``schema``) and its
    ``samples.json``, for the host to check and write; the process then exits 0."""

    schema: str = ""
    rows: tuple[dict[str, object], ...] = ()
    samples: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    """The worker failed (it exits 1): the error as ``Type: message``."""

    error: str


Reply = Ready | BlockDone | FreshDone | Finished | Failed


def reply_line(reply: Reply) -> str:
    """The wire form of ``reply`` (no newline)."""
    if isinstance(reply, Failed):
        return json.dumps({"ok": False, "error": reply.error})
    data: dict[str, object]
    if isinstance(reply, Ready):
        data = {"ready": list(reply.ready), "memory": reply.memory}
        if reply.shape_peaks:
            data["shape_peaks"] = reply.shape_peaks
    elif isinstance(reply, BlockDone):
        data = {
            "block": reply.block,
            "seconds": reply.seconds,
            "start": reply.start,
            "end": reply.end,
            "memory": reply.memory,
            "timings": {k: list(v) for k, v in reply.timings.items()},
        }
    elif isinstance(reply, FreshDone):
        data = {"fresh": True, "memory": reply.memory}
    else:
        data = {
            "finished": True,
            "schema": reply.schema,
            "rows": list(reply.rows),
            "samples": reply.samples,
        }
    return json.dumps({"ok": True, **data})


def parse_reply(line: str) -> Reply:
    """The reply a line holds; ProtocolError for anything else."""
    data = _object(line)
    memory = data.get("memory") or {}
    try:
        if data.get("ok") is not True:
            return Failed(str(data.get("error", data)))
        if "ready" in data:
            peaks = {str(k): int(v) for k, v in (data.get("shape_peaks") or {}).items()}
            return Ready(tuple(str(s) for s in data["ready"]), memory, peaks)
        if "block" in data:
            return BlockDone(
                int(data["block"]),
                float(data["seconds"]),
                float(data["start"]),
                float(data["end"]),
                memory,
                _timings(data.get("timings") or {}),
            )
        if data.get("fresh") is True:
            return FreshDone(memory)
        if data.get("finished") is True:
            rows = tuple(dict(r) for r in data.get("rows") or ())
            return Finished(str(data.get("schema", "")), rows, dict(data.get("samples") or {}))
    except (KeyError, TypeError, ValueError):
        pass
    raise ProtocolError(f"not a reply of the serving worker: {line.strip()[:200]!r}")


def _ms(value: str | float | None) -> float | None:
    return None if value is None else float(value)


def _timings(
    data: Mapping[str, Sequence[str | float | None]],
) -> dict[str, tuple[float | None, float | None]]:
    """A block's per-shape (forward, backward) medians as the wire holds them."""
    return {str(label): (_ms(pair[0]), _ms(pair[1])) for label, pair in data.items()}


def _object(line: str) -> dict[str, Any]:
    try:
        data = json.loads(line)
    except json.JSONDecodeError:
        raise ProtocolError(f"not JSON: {line.strip()[:200]!r}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"not a JSON object: {line.strip()[:200]!r}")
    return data
