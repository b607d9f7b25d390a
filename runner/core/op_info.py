"""Facts about each op that both sides read (no torch): schema class, whether it has a
backward path, the precision, where its worker-side adapter lives
(``runner.worker.ops``, named as a string, never imported here), and the device memory
one shape needs.  The host checks a manifest and plans its workers' memory with them;
the worker's adapters and checks use the same figures."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from runner.core.csv_schema import COMBINED_STEP, FORWARD_GBPS
from runner.core.errors import ConfigError, ValueRefused

if TYPE_CHECKING:
    from runner.core.shapes import Shape


@dataclass(frozen=True)
class OpInfo:
    name: str
    schema: str  # "gemm" | "memory" | "attention"
    has_backward: bool
    precision: str  # "bf16" | "fp8"
    adapter: str  # "module:Class" of the worker-side adapter
    primary_metric: str
    granularities: tuple[str, ...] = ()

    def check_granularity(self, granularity: str | None) -> None:
        if not self.granularities:
            if granularity:
                raise ConfigError(f"op {self.name} takes no --granularity (got {granularity!r})")
            return
        if granularity not in self.granularities:
            valid = ", ".join(self.granularities)
            raise ConfigError(
                f"op {self.name} needs --granularity, one of: {valid} (got {granularity!r})"
            )


_OPS: dict[str, OpInfo] = {}


def register_info(info: OpInfo) -> OpInfo:
    if info.name in _OPS:
        raise ValueError(f"op {info.name} registered twice")
    _OPS[info.name] = info
    return info


def op_info(name: str) -> OpInfo:
    """The OpInfo for ``name``; unknown names fail with the sorted valid ones."""
    try:
        return _OPS[name]
    except KeyError:
        valid = ", ".join(sorted(_OPS))
        raise ValueRefused(f"unknown op {name!r}; choose one of: {valid}") from None


register_info(OpInfo("gemm", "gemm", True, "bf16", "runner.worker.ops.gemm:GemmOp", COMBINED_STEP))
register_info(
    OpInfo(
        "gemm_fp8",
        "gemm",
        True,
        "fp8",
        "runner.worker.ops.gemm:Fp8GemmOp",
        COMBINED_STEP,
        granularities=("tensorwise", "rowwise", "blockwise", "mx_blockwise"),
    )
)

_FP8_GRANULARITIES = ("tensorwise", "rowwise", "blockwise")
register_info(
    OpInfo(
        "grouped_gemm",
        "gemm",
        True,
        "bf16",
        "runner.worker.ops.grouped_gemm:GroupedGemmOp",
        COMBINED_STEP,
    )
)
register_info(
    OpInfo(
        "grouped_gemm_fp8",
        "gemm",
        True,
        "fp8",
        "runner.worker.ops.grouped_gemm:Fp8GroupedGemmOp",
        COMBINED_STEP,
        granularities=_FP8_GRANULARITIES,
    )
)
register_info(
    OpInfo(
        "quantize",
        "memory",
        False,
        "fp8",
        "runner.worker.ops.quantize:QuantizeOp",
        FORWARD_GBPS,
        granularities=_FP8_GRANULARITIES,
    )
)
register_info(
    OpInfo(
        "attention",
        "attention",
        True,
        "bf16",
        "runner.worker.ops.attention:AttentionOp",
        COMBINED_STEP,
    )
)


# ---- device memory of one shape ------------------------------------------------------
@dataclass(frozen=True)
class ShapeMemory:
    """The device bytes one shape needs in a worker (an upper estimate, a pure function
    of the shape): ``member``, one member of its buffer pool, alive while the worker
    lives (inputs, outputs, gradients, FP8 copies and scales); ``work``, the most one
    step adds on top and drops again: the correctness check (pristine copies, the
    float32 reference and the op's outputs beside it, the SNR's float32 differences)
    or one call's transients (the float32 draw of an input, FP8 quantisation's float32
    copies)."""

    member: int
    work: int

    def worker(self, pool: int) -> int:
        """A worker measuring this shape alone with ``pool`` members."""
        return max(1, pool) * self.member + self.work


# The most bytes one tile of a GEMM's correctness check holds (float32 rows of its
# operands, the reference tile and the sums' temporaries: ``runner.worker.ops.sliced_check``);
# a shape's figure counts this, not its whole float32 reference.
CHECK_SLICE_BYTES = 256 << 20


def _dense(shape: Shape, fp8: bool) -> ShapeMemory:
    """GEMM out = a @ b^T (a M x K, b N x K per group; grouped GEMM ``b`` groups of b):
    a member holds bf16 a, b, grad_out, out and the gradients (2 bytes each), with FP8
    the FP8 copies of a, b and grad_out and their transposes (1 byte each).  The check
    holds pristine bf16 copies of the inputs, its own outputs and gradients and a
    second output (2 bytes each), and of the float32 reference one tile at a time
    (``CHECK_SLICE_BYTES``: a dense GEMM's check is sliced; a grouped GEMM's still
    makes its whole reference, 16 bytes per element over a, b, out, and the SNR's 8
    per output element); FP8's recipe guard holds its two emulated operands in float32
    (4 bytes per element of a and b); quantising the largest tensor takes three
    float32 copies of it (12 bytes), a bf16 call one (4)."""
    grouped = shape.group_sizes is not None
    groups = shape.b if grouped else 1
    a, w, out = shape.m * shape.k, groups * shape.n * shape.k, shape.m * shape.n
    every = a + w + out
    member = 2 * every + 2 * out + 2 * (a + w) + (2 * every if fp8 else 0)
    check = 16 * every + 8 * out if grouped else 4 * every + 2 * out + CHECK_SLICE_BYTES
    transient = (12 if fp8 else 4) * max(a, w, out) + (4 * (a + w) if fp8 else 0)
    return ShapeMemory(member, check + transient)


def _attention(shape: Shape, fp8: bool) -> ShapeMemory:
    """q, grad_out and out B x Sq x H x D, k and v B x Sk x KVH x D, their gradients,
    the log-sum-exp; the float32 reference materialises scores, probabilities and
    their gradients (B x H x Sq x Sk, 16 bytes) and float32 copies of every tensor."""
    heads = int(shape.params.get("heads", 1))
    kv = int(shape.params.get("kv_heads", heads))
    q, k = shape.b * shape.m * heads * shape.k, shape.b * shape.n * kv * shape.k
    tensors = 3 * q + 2 * k  # q, out, grad_out; k, v
    member = 2 * (tensors + q + 2 * k) + 4 * shape.b * heads * shape.m
    scores = shape.b * heads * shape.m * shape.n
    return ShapeMemory(member, 16 * scores + 16 * tensors)


def _quantize(shape: Shape, fp8: bool) -> ShapeMemory:
    """bf16 input M x N, its FP8 output and scales; the float32 draw of the input and
    the reference's float32 de-quantisation (16 bytes per element)."""
    x = shape.m * shape.n
    return ShapeMemory(3 * x + x // 8, 16 * x)


_MEMORY = {"gemm": _dense, "grouped_gemm": _dense, "attention": _attention, "quantize": _quantize}


def shape_memory(op: str, shape: Shape) -> ShapeMemory:
    """The device bytes one ``shape`` of ``op`` needs in a worker (``ShapeMemory``)."""
    info = op_info(op)
    formula = _MEMORY[op.removesuffix("_fp8")]
    return formula(shape, info.precision == "fp8")


def worker_bytes(op: str, shapes: Iterable[Shape], pool: int) -> int:
    """A serving worker measuring ``shapes`` with ``pool`` members each: every shape's
    pool is alive at once, one step's work at a time on top."""
    figures = [shape_memory(op, s) for s in shapes]
    if not figures:
        return 0
    return max(1, pool) * sum(f.member for f in figures) + max(f.work for f in figures)
