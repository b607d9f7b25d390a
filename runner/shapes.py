"""Shapes and the default shape sets, taken from real model configurations.

Worker-side safe (no pydantic, no torch).  A dense GEMM shape is (M, N, K) with
M = micro_batch * seqlen; the four GEMMs of a transformer layer are attention QKV,
attention out, MLP gate+up and MLP down.  Model facts (hidden size, FFN size, heads,
KV heads, head dim, sequence length) are the public model configurations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from runner.errors import ConfigError


@dataclass(frozen=True)
class Shape:
    """One benchmark case.  ``b`` is the batch/group count (1 for a plain GEMM);
    ``group_sizes`` holds tokens per expert for grouped GEMM (sum == m)."""

    label: str
    m: int
    n: int
    k: int
    b: int = 1
    group_sizes: tuple[int, ...] | None = None
    params: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def flops_fwd(self) -> float:
        """Forward FLOPs: 2*M*N*K per group (grouped GEMM counts real group sizes)."""
        if self.group_sizes is not None:
            return float(sum(2 * g * self.n * self.k for g in self.group_sizes))
        return float(2 * self.b * self.m * self.n * self.k)

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "m": self.m,
            "n": self.n,
            "k": self.k,
            "b": self.b,
            "group_sizes": list(self.group_sizes) if self.group_sizes is not None else None,
            "params": dict(self.params),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Shape:
        gs = d.get("group_sizes")
        return cls(
            label=d["label"],
            m=int(d["m"]),
            n=int(d["n"]),
            k=int(d["k"]),
            b=int(d.get("b", 1)),
            group_sizes=tuple(int(g) for g in gs) if gs is not None else None,
            params=dict(d.get("params") or {}),
        )


@dataclass(frozen=True)
class DenseModel:
    seqlen: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    head_dim: int = 128


DENSE_MODELS: dict[str, DenseModel] = {
    "Llama-2-7B": DenseModel(4096, 4096, 11008, 32, 32),
    "Llama-2-70B": DenseModel(4096, 8192, 28672, 64, 8),
    "Llama-3.1-8B": DenseModel(8192, 4096, 14336, 32, 8),
    "Llama-3.1-70B": DenseModel(8192, 8192, 28672, 64, 8),
    "Qwen2.5-7B": DenseModel(8192, 3584, 18944, 28, 4),
    "Qwen2.5-72B": DenseModel(8192, 8192, 29568, 64, 8),
    "Mistral-7B": DenseModel(4096, 4096, 14336, 32, 8),
}

MICRO_BATCHES = (1, 2, 4)


def layer_gemms(model: DenseModel) -> dict[str, tuple[int, int]]:
    """(N, K) of the four GEMMs of one layer, keyed by role."""
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
    return {
        "qkv": (qkv, model.hidden),
        "attn_out": (model.hidden, model.hidden),
        "gate_up": (2 * model.ffn, model.hidden),
        "down": (model.hidden, model.ffn),
    }


def model_gemm_shapes(
    models: dict[str, DenseModel] | None = None, micro_batches: tuple[int, ...] = MICRO_BATCHES
) -> list[Shape]:
    """All dense GEMM shapes of the given models, deduplicated by (M, N, K)."""
    seen: set[tuple[int, int, int]] = set()
    shapes: list[Shape] = []
    for name, model in (models or DENSE_MODELS).items():
        for mb in micro_batches:
            m = mb * model.seqlen
            for role, (n, k) in layer_gemms(model).items():
                if (m, n, k) in seen:
                    continue
                seen.add((m, n, k))
                label = f"{name}-{role}-mb{mb}-{m}x{n}x{k}"
                shapes.append(Shape(label, m, n, k, params={"model": name, "role": role}))
    return shapes


def cpu_gemm_shapes() -> list[Shape]:
    """The documented CPU-scaled set: the four GEMM roles of Llama-2-7B with M (the
    token count) divided by 64, N by 8 and K by 4 (K rounded up to a multiple of 128
    so the blockwise FP8 path sees whole blocks), plus a launch-bound small case, so
    that a CPU baseline pass takes seconds on two cores."""
    model = DENSE_MODELS["Llama-2-7B"]
    m = model.seqlen // 64
    shapes = [Shape("cpu-small-16x256x1024", 16, 256, 1024, params={"role": "small"})]
    for role, (n, k) in layer_gemms(model).items():
        n_s, k_s = n // 8, _round_up(k // 4, 128)
        label = f"cpu-llama2-7b-{role}-{m}x{n_s}x{k_s}"
        shapes.append(Shape(label, m, n_s, k_s, params={"model": "Llama-2-7B", "role": role}))
    return shapes


def _round_up(x: int, mult: int) -> int:
    return ((x + mult - 1) // mult) * mult


def tiny_gemm_shapes() -> list[Shape]:
    """Five tiny shapes for the test suite: a whole pass in about a second."""
    dims = [(16, 128, 1024), (32, 128, 1024), (32, 256, 1024), (48, 256, 1024), (64, 256, 1024)]
    return [Shape(f"tiny-{m}x{n}x{k}", m, n, k) for m, n, k in dims]


SHAPE_SETS = {
    "models": model_gemm_shapes,
    "cpu": cpu_gemm_shapes,
    "tiny": tiny_gemm_shapes,
}


def shape_set(name: str) -> list[Shape]:
    """A default shape set by name; unknown names fail with the valid ones."""
    try:
        factory = SHAPE_SETS[name]
    except KeyError:
        valid = ", ".join(sorted(SHAPE_SETS))
        raise ConfigError(f"unknown shape set {name!r}; choose one of: {valid}") from None
    return factory()


def parse_shape(text: str) -> Shape:
    """Parse ``MxNxK`` (or ``BxMxNxK``) into a Shape labelled by the text."""
    parts = text.lower().split("x")
    try:
        dims = [int(p) for p in parts]
    except ValueError:
        raise ConfigError(f"bad shape {text!r}: write MxNxK, e.g. 4096x4096x4096") from None
    if len(dims) == 3:
        return Shape(text, dims[0], dims[1], dims[2])
    if len(dims) == 4:
        return Shape(text, dims[1], dims[2], dims[3], b=dims[0])
    raise ConfigError(f"bad shape {text!r}: write MxNxK or BxMxNxK")
