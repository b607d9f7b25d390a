"""Host-side facts about each op adapter (no torch): schema class, whether it has a
backward path, the precision, and where its worker-side adapter lives."""

from __future__ import annotations

from dataclasses import dataclass

from runner.core.errors import ConfigError


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
        raise ConfigError(f"unknown op {name!r}; choose one of: {valid}") from None


COMBINED = "Combined Step TFLOPS"

register_info(OpInfo("gemm", "gemm", True, "bf16", "runner.ops.gemm:GemmOp", COMBINED))
register_info(
    OpInfo(
        "gemm_fp8",
        "gemm",
        True,
        "fp8",
        "runner.ops.gemm:Fp8GemmOp",
        COMBINED,
        granularities=("tensorwise", "rowwise", "blockwise", "mx_blockwise"),
    )
)

_FP8_GRANULARITIES = ("tensorwise", "rowwise", "blockwise")
register_info(
    OpInfo("grouped_gemm", "gemm", True, "bf16", "runner.ops.grouped_gemm:GroupedGemmOp", COMBINED)
)
register_info(
    OpInfo(
        "grouped_gemm_fp8",
        "gemm",
        True,
        "fp8",
        "runner.ops.grouped_gemm:Fp8GroupedGemmOp",
        COMBINED,
        granularities=_FP8_GRANULARITIES,
    )
)
register_info(
    OpInfo(
        "quantize",
        "memory",
        False,
        "fp8",
        "runner.ops.quantize:QuantizeOp",
        "Forward GB/s",
        granularities=_FP8_GRANULARITIES,
    )
)
register_info(
    OpInfo("attention", "attention", True, "bf16", "runner.ops.attention:AttentionOp", COMBINED)
)
