"""The serving worker's messages (runner.core.worker_messages): every kind survives its
line, the wire keeps the spelling the protocol has always had, and a line that is not a
message is refused by a ProtocolError that quotes it.  A real serving worker speaks them
in tests/test_paired.py."""

from __future__ import annotations

import json

import pytest

from runner.core.worker_messages import (
    Block,
    BlockDone,
    Failed,
    Finish,
    Finished,
    Fresh,
    FreshDone,
    ProtocolError,
    Ready,
    Reply,
    Request,
    parse_reply,
    parse_request,
    reply_line,
    request_line,
)

MEMORY = {"reserved": 3 << 30, "held": 1 << 30, "free": 100 << 30, "total": 140 << 30}


@pytest.mark.parametrize("request_", [Block(3, 1), Block(0), Fresh(), Finish()])
def test_every_request_survives_its_line(request_: Request) -> None:
    assert parse_request(request_line(request_)) == request_


@pytest.mark.parametrize(
    "reply",
    [
        Ready(("a", "b"), MEMORY),
        Ready(("a",)),
        BlockDone(2, 0.25, 1000.0, 1000.5, MEMORY),
        BlockDone(1, 0.2, 1.0, 1.2, {}, {"s1": (0.5, 1.25), "s2": (0.75, None)}),
        FreshDone(MEMORY),
        FreshDone(),
        Finished(),
        Finished("gemm", ({"label": "s1", "Forward Time (ms)": 0.5},), {"shapes": {}}),
        Failed("RuntimeError: boom"),
    ],
)
def test_every_reply_survives_its_line(reply: Reply) -> None:
    assert parse_reply(reply_line(reply)) == reply


def test_the_wire_spells_the_messages_as_before() -> None:
    assert json.loads(request_line(Block(4, 2))) == {"op": "block", "index": 4, "pick": 2}
    assert json.loads(request_line(Finish())) == {"op": "finish"}
    done = json.loads(reply_line(BlockDone(4, 0.5, 1.0, 2.0, {})))
    assert done == {
        "ok": True,
        "block": 4,
        "seconds": 0.5,
        "start": 1.0,
        "end": 2.0,
        "memory": {},
        "timings": {},
    }
    assert json.loads(reply_line(Failed("x"))) == {"ok": False, "error": "x"}
    assert parse_reply('{"ok": false}') == Failed("{'ok': False}")  # no error named


@pytest.mark.parametrize(
    "line",
    ['{"op": "measure"}', '{"op": "block"}', '{"op": "block", "index": "two"}', "[1]", "ok"],
)
def test_a_line_that_is_no_request_is_refused_by_name(line: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_request(line)
    assert line in str(caught.value)


@pytest.mark.parametrize(
    "line", ['{"ok": true}', '{"ok": true, "block": 1}', '{"ok": true, "fresh": false}', "{"]
)
def test_a_line_that_is_no_reply_is_refused(line: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_reply(line)
    assert line[:10] in str(caught.value)
