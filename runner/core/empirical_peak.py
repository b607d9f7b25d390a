"""An empirical peak: the rate a reference GEMM (torch.matmul in a dtype) reached on the
campaign's own card, beside the datasheet's.  Measured FP8 on gfx950 reached about half
its datasheet peak, so a veto against the datasheet lets a number twice too fast pass;
against the measured peak (times ``MARGIN``: a hand-tuned kernel may beat the library
by some) it does not.  Written by the worker side (``runner.worker.bench.empirical_peak``),
read by the judge (``runner.judge.peaks``); stdlib only."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

MARGIN = 0.25  # a candidate may beat the reference GEMM by this much before it is vetoed


@dataclass(frozen=True)
class EmpiricalPeak:
    """``tflops``: dtype name ("bf16", "fp8", ...) -> the best TFLOPS the reference GEMM
    reached on ``gpu`` (the device name torch gives), at ``shape`` (M, N, K)."""

    gpu: str
    tflops: dict[str, float] = field(default_factory=dict)
    shape: tuple[int, int, int] = (8192, 8192, 8192)
    torch: str = ""
    notes: tuple[str, ...] = ()

    def limit(self, gpu: str, dtype: str) -> float | None:
        """The rate above which ``gpu``'s ``dtype`` reading is vetoed; None when this
        peak is of another card or dtype."""
        value = self.tflops.get(dtype.lower().removeprefix("torch."))
        if value is None or gpu != self.gpu:
            return None
        return value * (1.0 + MARGIN)

    def to_dict(self) -> dict[str, object]:
        return {
            "gpu": self.gpu,
            "tflops": dict(self.tflops),
            "shape": list(self.shape),
            "torch": self.torch,
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, object]) -> EmpiricalPeak:
        tflops = d.get("tflops")
        shape = d.get("shape")
        notes = d.get("notes")
        dims = [int(x) for x in shape] if isinstance(shape, list) and len(shape) == 3 else []
        return cls(
            gpu=str(d.get("gpu") or ""),
            tflops={
                str(k): float(v)
                for k, v in (tflops.items() if isinstance(tflops, Mapping) else ())
                if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
            },
            shape=(dims[0], dims[1], dims[2]) if dims else (8192, 8192, 8192),
            torch=str(d.get("torch") or ""),
            notes=tuple(str(n) for n in notes) if isinstance(notes, list) else (),
        )
