"""The replay check (docs/reliability.md §8, on a GPU): a timed callable captured into a CUDA
graph is timed by replaying the graph, which runs only the device work recorded while
it was captured.  Anything the callable did on the host then (computing on the CPU,
waiting on a helper process that did the device work in its own context, looking up a
result kept from an earlier call) is done once, at capture, and never again: its
product is replayed as a copy, and the replays look almost free.

So after the timed batches the engine negates, in place, one input of the callable
whose negation negates its named outputs (the op says which: ``runner.worker.ops.base.
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
from typing import TYPE_CHECKING, Protocol

from runner.worker.bench.proctree import ClockBlind

if TYPE_CHECKING:
    import torch

# |after + before| may reach this share of |before|'s largest element where the kernel
# reduces in an order that varies from run to run (atomics); a frozen output reads 2.
TOLERANCE = 1e-2
# Elements compared per output, at positions drawn after the timed calls (all of them in
# a smaller output): a partly frozen result is seen unless it is honest at every drawn one.
SAMPLES = 1 << 20


class FrozenReplay(ClockBlind):
    """A graph replay did not compute from the callable's inputs."""


class ReplayProbe(Protocol):
    """What a timed callable offers the check: ``flip()`` negates its input in place
    (again: restores it), ``outputs()`` the named outputs of its last call."""

    def flip(self) -> None: ...

    def outputs(self) -> Sequence[torch.Tensor]: ...


def sample_at(values: torch.Tensor, where: tuple[torch.Tensor, ...] | None) -> torch.Tensor:
    """The elements of ``values`` at ``where`` (one index tensor per dimension) as
    float32, or all of them where ``where`` is None; no copy of the whole tensor."""
    got = values.detach()
    picked = got.reshape(-1) if where is None else got[where]
    return picked.float().clone()  # FP8 codes have no arithmetic; float32 is not copied


def positions(values: torch.Tensor) -> tuple[torch.Tensor, ...] | None:
    """SAMPLES positions of ``values`` drawn now, after the timed calls (None: every
    element, for a tensor that small): the check holds no full copy of a large output."""
    import torch

    if values.numel() <= SAMPLES:
        return None
    return tuple(torch.randint(0, size, (SAMPLES,), device=values.device) for size in values.shape)


def negated(before: torch.Tensor, after: torch.Tensor) -> bool:
    """``after`` is ``-before`` (within TOLERANCE of before's scale); an all-zero sample
    proves nothing and passes."""
    scale = float(before.abs().max()) if before.numel() else 0.0
    if scale == 0.0:
        return True
    return float((after + before).abs().max()) <= TOLERANCE * scale


def check_replay(
    probe: ReplayProbe | None,
    replay: Callable[[], object],
    synchronize: Callable[[], object],
    method: str = "graph_replay",
) -> None:
    """Raise ``FrozenReplay`` when ``replay`` (timed by ``method``: a captured graph's
    replay, or plain launches of the call) does not follow a negated input."""
    if probe is None:
        return
    where = [positions(t) for t in probe.outputs()]
    before = [sample_at(t, w) for t, w in zip(probe.outputs(), where, strict=True)]
    probe.flip()
    try:
        replay()
        synchronize()
        after = [sample_at(t, w) for t, w in zip(probe.outputs(), where, strict=True)]
        stale = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if not negated(b, a)]
    finally:
        probe.flip()
        replay()
        synchronize()
    if stale and method == "graph_replay":
        raise FrozenReplay(
            f"replay check: output(s) {stale} of the captured graph did not follow its "
            "negated input: the timed replays repeated a result made while the graph was "
            "captured (host work, another process's device work, a kept result) instead "
            "of computing it; do the op's work as device work launched by the call"
        )
    if stale:
        raise FrozenReplay(
            f"replay check: output(s) {stale} of the timed call did not follow its negated "
            f"input (timed by {method}): the call returned a result it had kept or that "
            "other work made (host work, another process's device work, one kept by its "
            "input's address) instead of computing it; do the op's work as device work "
            "launched by the call"
        )
