"""The replay check (issue 46 item 2, on a GPU): a timed callable captured into a CUDA
graph is timed by replaying the graph, which runs only the device work recorded while
it was captured.  Anything the callable did on the host then (computing on the CPU,
waiting on a helper process that did the device work in its own context, looking up a
result kept from an earlier call) is done once, at capture, and never again: its
product is replayed as a copy, and the replays look almost free.

So after the timed batches the engine negates, in place, one input of the callable
whose negation negates its named outputs (the op says which: ``runner.ops.base.
InputFlip``), replays the graph once and requires each named output to come back
negated as soon as the worker's device work has ended; then negates the input back and
replays again, so the outputs hold what they held.  Timed with plain launches, the
"replay" is one more call: the stream's events already count what the call waited for,
and the check adds that its outputs are complete when its device work ends (not filled
in later by another process's device work).  A call that computes from its inputs
passes whatever the work is (negation is exact in floating point and symmetric in FP8
quantisation); a frozen result comes back unchanged and the shape FAILs
(``FrozenReplay``, named).  Worker-side.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from runner.bench.proctree import ClockBlind

# |after + before| may reach this share of |before|'s largest element where the kernel
# reduces in an order that varies from run to run (atomics); a frozen output reads 2.
TOLERANCE = 1e-2


class FrozenReplay(ClockBlind):
    """A graph replay did not compute from the callable's inputs."""


class ReplayProbe(Protocol):
    """What a timed callable offers the check: ``flip()`` negates its input in place
    (again: restores it), ``outputs()`` the named outputs of its last call."""

    def flip(self) -> None: ...

    def outputs(self) -> Sequence[Any]: ...


def negated(before: Any, after: Any) -> bool:
    """``after`` is ``-before`` (within TOLERANCE of before's scale); an all-zero output
    proves nothing and passes."""
    was = before.detach().float()  # FP8 codes have no abs() of their own
    scale = float(was.abs().max()) if was.numel() else 0.0
    if scale == 0.0:
        return True
    gap = float((after.detach().float() + was).abs().max())
    return gap <= TOLERANCE * scale


def check_replay(
    probe: ReplayProbe | None, replay: Callable[[], object], synchronize: Callable[[], object]
) -> None:
    """Raise ``FrozenReplay`` when ``replay`` does not follow a negated input."""
    if probe is None:
        return
    before = [t.detach().clone() for t in probe.outputs()]
    probe.flip()
    try:
        replay()
        synchronize()
        stale = [i for i, (b, a) in enumerate(zip(before, probe.outputs(), strict=True))
                 if not negated(b, a)]  # fmt: skip
    finally:
        probe.flip()
        replay()
        synchronize()
    if stale:
        raise FrozenReplay(
            f"replay check: output(s) {stale} of the captured graph did not follow its "
            "negated input: the timed replays repeated a result made while the graph was "
            "captured (host work, another process's device work, a kept result) instead "
            "of computing it; do the op's work as device work launched by the call"
        )
