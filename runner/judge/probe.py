"""The unannounced shape of a quick round (docs/protocol.md §5.7, docs/reliability.md §7 row 21).

A quick round measures the representative shapes, which ``manifest.yaml`` lists (and
so do the targets): a change tuned to the listed shapes (a fast path for exactly their
dimensions, a slow loop elsewhere) reads as a gain there.  So a quick round also
measures one shape that no file lists: a GEMM of a representative shape (rotating by
round number) with another M (the token count, which a real model's GEMMs see in
every size), drawn for the round and not equal to any shape of the campaign's set.
It is written nowhere before the round starts (its spec is written when its workers
start).  ``runner.compare.loop.judge`` judges it with the held-out rule of final
acceptance (``runner.judge.heldout``) against the listed shapes: a change whose gain
does not hold there is vetoed by the **unannounced-shape guard**.

Only plain GEMM-like shapes (no groups, no attention heads) get a probe; others none.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from runner.core.shapes import Shape

PROBE_PREFIX = "probe-"  # a probe shape's label starts so; no shape set's does
GUARD = "unannounced-shape guard"


def is_probe(label: str) -> bool:
    return label.startswith(PROBE_PREFIX)


def probe_shape(
    representative: Sequence[Shape], known: Sequence[Shape], round_n: int, salt: str
) -> Shape | None:
    """Round ``round_n``'s unannounced shape: the representative shape at ``round_n``
    (rotating) with M moved by a drawn 16, 32 or 48 (up or down, never below 16),
    its dimensions none of ``known``'s; None when no representative shape is a plain
    GEMM."""
    plain = sorted(
        (s for s in representative if s.group_sizes is None and "heads" not in s.params),
        key=lambda s: s.label,
    )
    if not plain:
        return None
    base = plain[round_n % len(plain)]
    taken = {(s.m, s.n, s.k, s.b) for s in known}
    rng = random.Random(f"{salt}:{round_n}")
    steps = [d for d in range(-3, 4) if d and base.m + 16 * d >= 16]  # near: an honest gain holds
    rng.shuffle(steps)
    for d in steps:
        m = base.m + 16 * d
        if (m, base.n, base.k, base.b) not in taken:
            label = f"{PROBE_PREFIX}r{round_n}-{m}x{base.n}x{base.k}"
            return replace(base, label=label, m=m, params={**base.params, "probe_of": base.label})
    return None
