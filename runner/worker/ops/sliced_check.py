"""A GEMM output judged against its float32 reference slice by slice.

The reference of ``got = x @ y^T`` (x P x R, y Q x R) is made one tile of rows and
columns at a time, from float32 copies of those rows of ``x`` and ``y`` only; each tile
is compared with the same tile of ``got`` and dropped.  What the judges need is summed
over the tiles in float64: the reference's energy and the error's (the SNR), and the
largest excess of ``|got - ref|`` over ``rtol * |ref|`` (``allclose`` on values divided
by the reference's RMS, ``runner.worker.ops.gemm.allclose_normalised``, is ``excess <= atol *
rms``).  So the float32 memory of a check is bounded by
``runner.core.op_info.CHECK_SLICE_BYTES``, however large the shape, where a whole float32
reference of a 32768 x 57344 output is 7 GiB.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from runner.core import op_info as info  # info.CHECK_SLICE_BYTES: the bound a shape's figure counts

RTOL = ATOL = 1e-2
TILE_ELEMENT_BYTES = 4 + 4 + 8 + 8  # reference, got as float32, two float64 temporaries


@dataclass
class Comparison:
    """One output against its reference, summed over the tiles."""

    signal: float = 0.0  # sum of ref^2 (float64)
    noise: float = 0.0  # sum of (got - ref)^2
    excess: float = -math.inf  # max of |got - ref| - RTOL * |ref| (NaN when got has one)
    count: int = 0

    def snr_db(self) -> float:
        """10*log10(signal / noise); +inf when identical (``runner.worker.ops.base.snr_db``)."""
        if self.noise == 0.0:
            return math.inf
        if math.isnan(self.noise) or math.isnan(self.signal):
            return math.nan
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    def allclose(self) -> bool:
        """``allclose(got / rms, ref / rms, rtol=atol=1e-2)`` with rms the reference's."""
        rms = max(math.sqrt(self.signal / self.count), 1e-30) if self.count else 1e-30
        return not math.isnan(self.excess) and self.excess <= ATOL * rms


def tile_rows(p: int, q: int, r: int, bound: int | None = None) -> tuple[int, int]:
    """Rows of x and of y per tile so that a tile's float32 operand rows (``(tp + tq) *
    r * 4`` bytes) and its output temporaries (``tp * tq * TILE_ELEMENT_BYTES``) stay
    within ``bound`` (``info.CHECK_SLICE_BYTES``); at least one of each."""
    bound = info.CHECK_SLICE_BYTES if bound is None else bound
    tp, tq = max(1, p), max(1, q)
    while tp > 1 or tq > 1:
        if 4 * (tp + tq) * r + TILE_ELEMENT_BYTES * tp * tq <= bound:
            break
        if tp >= tq:
            tp = (tp + 1) // 2
        else:
            tq = (tq + 1) // 2
    return tp, tq


def compare(
    gots: Sequence[torch.Tensor], x: torch.Tensor, y: torch.Tensor, bound: int | None = None
) -> list[Comparison]:
    """Each of ``gots`` against the float32 reference ``x @ y^T``, made one tile at a
    time and shared by them (x and y may be transposed views: only a tile's rows are
    copied)."""
    p, q, r = x.shape[0], y.shape[0], x.shape[1]
    tp, tq = tile_rows(p, q, r, bound)
    out = [Comparison(count=p * q) for _ in gots]
    with torch.no_grad():
        for i in range(0, p, tp):
            xs = x[i : i + tp].float()
            for j in range(0, q, tq):
                ref = xs @ y[j : j + tq].float().t()
                signal = _squares(ref)
                for got, c in zip(gots, out, strict=True):
                    c.signal += signal
                    _add_tile(c, got[i : i + tp, j : j + tq], ref)
                del ref
            del xs
    return out


def _add_tile(c: Comparison, got: torch.Tensor, ref: torch.Tensor) -> None:
    diff = got.float() - ref
    c.noise += _squares(diff)
    if ref.numel():
        excess = float(diff.abs_().sub_(ref.abs(), alpha=RTOL).max())
        c.excess = excess if math.isnan(excess) else max(c.excess, excess)


def _squares(t: torch.Tensor) -> float:
    """The sum of ``t``'s squares in float64 (one float64 copy of the tile at a time)."""
    wide = t.double()
    return float(wide.mul_(wide).sum())


def gemm_operands(
    a: torch.Tensor, b: torch.Tensor, g: torch.Tensor
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """The (x, y) of each GEMM output as ``x @ y^T``: ``out = a @ b^T``, ``da = g @ b``,
    ``db = g^T @ a`` (views: ``compare`` copies one tile's rows at a time)."""
    return {"out": (a, b), "da": (g, b.t()), "db": (g.t(), a.t())}
