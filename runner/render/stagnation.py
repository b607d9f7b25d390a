"""Stagnation triggers beyond rollbacks in a row (docs/protocol.md §7.1; upstream's
optimize-loop.md "Stagnation Detection and Conditional Intervention", checked at
Primus-Turbo a6a16cdc): "recent rounds only show parameter jitter with no structurally
new hypotheses".  A trigger calls for a stagnation review, never a stop.

A round's change is parameter jitter when every line it removes is paired, in order,
with a line it adds that differs from it only in numeric literals (a tile size, a warp
or stage count): ``parameter_only``.  ``JITTER_ROUNDS`` such rounds in a row trigger the
review.  Upstream's other triggers: two rollbacks in a row (``runner.render.status``);
"minor adjustments in the same direction with no measurable improvement" is two or more
rounds without an accepted gain, so the rollbacks in a row hold it; an unchanged
profiler bottleneck is read in ``profiles/round-N/profile.md`` (docs/analysis.md), which
the status names after two rollbacks."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from runner.judge.resubmission import patch_lines

JITTER_ROUNDS = 3
NUMBER = re.compile(r"(?<![\w.])(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?(?![\w.])")


def _changed_lines(patch: str) -> tuple[list[str], list[str]]:
    """Every removed and every added line of ``patch``, stripped, read inside its hunks
    (``runner.judge.resubmission.patch_lines``: a mail header or a ``-- `` signature
    of ``git format-patch`` is no changed line)."""
    removed: list[str] = []
    added: list[str] = []
    for old, new in patch_lines(patch).values():
        removed += [line.strip() for line in old]
        added += [line.strip() for line in new]
    return removed, added


def parameter_only(patch: str) -> bool:
    """Whether ``patch`` changes numeric literals only (see the module docstring)."""
    removed, added = _changed_lines(patch)
    if not removed or len(removed) != len(added):
        return False
    pairs = list(zip(removed, added, strict=True))
    same_shape = all(NUMBER.sub("N", a) == NUMBER.sub("N", b) for a, b in pairs)
    return same_shape and any(a != b for a, b in pairs)


def jitter_trigger(rounds: Sequence[int], patches: Mapping[int, str]) -> str | None:
    """The parameter-jitter trigger over the last ``JITTER_ROUNDS`` of ``rounds`` (the
    closed VALIDATE rounds in order; ``patches``: round -> its candidate.patch), or None."""
    last = list(rounds)[-JITTER_ROUNDS:]
    if len(last) < JITTER_ROUNDS or not all(parameter_only(patches.get(n, "")) for n in last):
        return None
    return (
        f"parameter jitter: rounds {last[0]}-{last[-1]} each changed only numeric "
        "parameters (no structurally new hypothesis)"
    )
