"""Shapes and the default shape sets, taken from real model configurations.

Worker-side safe (no pydantic, no torch).  A dense GEMM shape is (M, N, K) with
M = micro_batch * seqlen; the four GEMMs of a transformer layer are attention QKV,
attention out, MLP gate+up and MLP down.  Model facts (hidden size, FFN size, heads,
KV heads, head dim, sequence length) are the public model configurations.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from runner.core.errors import ConfigError
from runner.core.layer_gemms import layer_gemms
from runner.core.upstream_shapes import (
    UPSTREAM_SETS,
    UpstreamRow,
    is_selector,
    parse_dims,
    select_rows,
    upstream_rows,
)

ATTENTION_BWD_RATIO = 2.5  # backward FLOPs / forward FLOPs (the flash-attention convention)


def attention_fwd_flops(b: float, h: float, sq: float, sk: float, d: float, causal: bool) -> float:
    """Forward FLOPs of attention: Q K^T and P V, 2*B*H*Sq*Sk*D each; causal halves."""
    full = 4.0 * b * h * sq * sk * d
    return full / 2.0 if causal else full


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
        """Forward FLOPs: 2*M*N*K per group (grouped GEMM counts real group sizes);
        attention (``params["heads"]``, m = query length, n = key length, k = head dim):
        4*B*H*Sq*Sk*D for the two matmuls, halved when causal; quantisation
        (``params["op"] == "quantize"``): 2*M*N, a size figure for ordering only."""
        if self.group_sizes is not None:
            return float(sum(2 * g * self.n * self.k for g in self.group_sizes))
        if "heads" in self.params:
            heads = int(self.params["heads"])
            causal = bool(self.params.get("causal"))
            return attention_fwd_flops(self.b, heads, self.m, self.n, self.k, causal)
        return float(2 * self.b * self.m * self.n * self.k)

    def to_dict(self) -> dict[str, object]:
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
    """Five small shapes for the test suite: a pass in seconds.  N is not a whole
    number of 128-blocks (as Llama-2-7B's MLP width over 16 is not), so the blockwise
    weight quantisation pads; that is where the demo's speed-up patch wins clearly
    (13-20% a step on each of these, single-threaded CPU time, medians of 7 steps on
    the 2-core CI machine at 7782301, 2026-12-06).  K is 512 (four 128-blocks): every
    check, turn and simulation of the suite costs about half what it did at K 1024,
    and the planted effects keep their size (the slow base 1.5-1.6x, the fp64
    slow-down 1.3x)."""
    dims = [(16, 688, 512), (32, 688, 512), (32, 1376, 512), (48, 1376, 512), (64, 1376, 512)]
    return [Shape(f"tiny-{m}x{n}x{k}", m, n, k) for m, n, k in dims]


# ---------------------------------------------------------------- MoE (grouped GEMM)


@dataclass(frozen=True)
class MoeModel:
    experts: int
    hidden: int
    moe_ffn: int  # moe_intermediate_size (per expert)


MOE_MODELS: dict[str, MoeModel] = {
    "DeepSeek-V3": MoeModel(256, 7168, 2048),
    "Qwen3-30B-A3B": MoeModel(128, 2048, 768),
    "Mixtral-8x7B": MoeModel(8, 4096, 14336),
}
# expert-parallel size per model: experts per rank B = experts / EP (Primus-Turbo's
# benchmark takes such slices)
MOE_EP: dict[str, int] = {"DeepSeek-V3": 32, "Qwen3-30B-A3B": 16, "Mixtral-8x7B": 1}
MOE_TOKENS = (4096, 16384)


def moe_gemms(model: MoeModel) -> dict[str, tuple[int, int]]:
    """(N, K) of the two grouped GEMMs of an MoE layer's experts (b is (G, N, K))."""
    return {"GateUP": (2 * model.moe_ffn, model.hidden), "Down": (model.hidden, model.moe_ffn)}


def grouped_shape(
    prefix: str, groups: int, tokens: int, n: int, k: int, dist: str, seed: int = 0
) -> Shape:
    """One grouped-GEMM shape: ``tokens`` routed rows over ``groups`` experts with the
    token distribution ``dist``; m = the rows actually kept (sum of the group sizes)."""
    from runner.core.moe_routing import group_sizes

    sizes = group_sizes(dist, tokens, groups, seed)
    params = {"distribution": dist, "routed_tokens": tokens, "seed": seed}
    label = f"{prefix}-B{groups}-M{tokens}-{dist}"
    return Shape(label, sum(sizes), n, k, b=groups, group_sizes=sizes, params=params)


def moe_shapes(tokens: tuple[int, ...] = MOE_TOKENS) -> list[Shape]:
    """Grouped GEMMs of the MoE models' experts, every token distribution."""
    from runner.core.moe_routing import DISTRIBUTIONS

    shapes = []
    for name, model in MOE_MODELS.items():
        ep = MOE_EP[name]
        for role, (n, k) in moe_gemms(model).items():
            for m in tokens:
                for dist in DISTRIBUTIONS:
                    prefix = f"{name}-{role}-ep{ep}"
                    shapes.append(grouped_shape(prefix, model.experts // ep, m, n, k, dist))
    return shapes


def cpu_moe_shapes() -> list[Shape]:
    """CPU-scaled grouped GEMMs: DeepSeek-V3's expert GEMMs (ep32: 8 groups) with N and
    K divided by 8 and 14 (K a multiple of 128 for blockwise FP8), 512 routed tokens,
    every distribution: a pass takes seconds on two cores."""
    shapes = []
    for role, (n, k) in {"GateUP": (512, 512), "Down": (512, 256)}.items():
        for dist in _distributions():
            shapes.append(grouped_shape(f"cpu-DeepSeek-V3-{role}-ep32", 8, 512, n, k, dist))
    return shapes


def tiny_moe_shapes() -> list[Shape]:
    """Eight tiny grouped shapes (two per distribution) for the test suite."""
    shapes = []
    for role, (n, k) in {"GateUP": (128, 128), "Down": (64, 128)}.items():
        for dist in _distributions():
            shapes.append(grouped_shape(f"tiny-{role}", 4, 64, n, k, dist))
    return shapes


def _distributions() -> tuple[str, ...]:
    from runner.core.moe_routing import DISTRIBUTIONS

    return DISTRIBUTIONS


# ---------------------------------------------------------------- quantisation


def quant_shapes() -> list[Shape]:
    """FP8 quantisation of the dense models' activations: (micro_batch * seqlen) tokens
    x hidden, micro-batch 1 and 2, deduplicated."""
    seen: set[tuple[int, int]] = set()
    shapes = []
    for name, model in DENSE_MODELS.items():
        for mb in (1, 2):
            m = mb * model.seqlen
            if (m, model.hidden) not in seen:
                seen.add((m, model.hidden))
                shapes.append(
                    _quant_shape(f"{name}-act-mb{mb}-{m}x{model.hidden}", m, model.hidden)
                )
    return shapes


def cpu_quant_shapes() -> list[Shape]:
    """CPU-scaled activations: Llama-2-7B's hidden / 4 and Qwen2.5-7B's hidden / 4."""
    dims = [(64, 1024), (256, 1024), (1024, 1024), (512, 896), (2048, 896)]
    return [_quant_shape(f"cpu-act-{m}x{n}", m, n) for m, n in dims]


def tiny_quant_shapes() -> list[Shape]:
    dims = [(16, 256), (32, 256), (64, 384), (96, 256), (128, 512)]
    return [_quant_shape(f"tiny-act-{m}x{n}", m, n) for m, n in dims]


def _quant_shape(label: str, m: int, n: int) -> Shape:
    return Shape(label, m, n, 1, params={"op": "quantize"})


# ---------------------------------------------------------------- attention


def attention_shape(
    prefix: str, batch: int, heads: int, kv_heads: int, seqlen: int, head_dim: int, causal: bool
) -> Shape:
    """Self-attention: q (B, S, H, D), k and v (B, S, H_kv, D); m = n = S, k = D."""
    mask = "causal" if causal else "full"
    label = f"{prefix}-B{batch}-H{heads}-KV{kv_heads}-S{seqlen}-D{head_dim}-{mask}"
    params = {"heads": heads, "kv_heads": kv_heads, "causal": causal}
    return Shape(label, seqlen, seqlen, head_dim, b=batch, params=params)


def attention_shapes() -> list[Shape]:
    """Attention of the dense models (and the GQA of Qwen2.5), micro-batch 1 and 2,
    causal and not."""
    shapes = []
    for name in ("Llama-2-7B", "Llama-3.1-8B", "Qwen2.5-7B", "Llama-3.1-70B"):
        model = DENSE_MODELS[name]
        for mb in (1, 2):
            for causal in (True, False):
                shapes.append(
                    attention_shape(
                        name, mb, model.heads, model.kv_heads, model.seqlen, model.head_dim, causal
                    )
                )
    return shapes


def cpu_attention_shapes() -> list[Shape]:
    """CPU-scaled attention: 8 heads (GQA over 2 KV heads), head dim 64."""
    return [
        attention_shape("cpu-attn", 1, 8, 2, s, 64, causal)
        for s in (128, 256, 512)
        for causal in (True, False)
    ]


def tiny_attention_shapes() -> list[Shape]:
    return [
        attention_shape("tiny-attn", b, 4, kv, s, 32, causal)
        for b, kv, s, causal in [
            (1, 2, 32, True),
            (1, 4, 64, False),
            (2, 2, 48, True),
            (1, 1, 96, False),
            (2, 4, 64, True),
        ]
    ]


# ---------------------------------------------------------------- upstream's own rows


def upstream_shape(row: UpstreamRow) -> Shape:
    """One of Primus-Turbo's benchmark rows as a target shape; its params name the
    ``case`` (upstream's Case column: the model), ``gemm`` and ``mbs``."""
    params = {"case": row.case, "gemm": row.gemm, "mbs": row.mbs}
    return Shape(row.label, row.m, row.n, row.k, params=params)


def _upstream_factory(name: str) -> Callable[[], list[Shape]]:
    def factory() -> list[Shape]:
        return [upstream_shape(r) for r in upstream_rows(*UPSTREAM_SETS[name])]

    factory.__doc__ = f"Primus-Turbo bench_gemm_turbo.py's rows: {name}."
    return factory


def plain_shape(label: str) -> Shape | None:
    """A plain ``MxNxK`` target, in no set: matched by its dimensions alone."""
    dims = parse_dims(label)
    return Shape(label, *dims) if dims else None


SHAPE_SETS = {
    "models": model_gemm_shapes,
    "cpu": cpu_gemm_shapes,
    "tiny": tiny_gemm_shapes,
    "moe": moe_shapes,
    "moe-cpu": cpu_moe_shapes,
    "moe-tiny": tiny_moe_shapes,
    "quant": quant_shapes,
    "quant-cpu": cpu_quant_shapes,
    "quant-tiny": tiny_quant_shapes,
    "attn": attention_shapes,
    "attn-cpu": cpu_attention_shapes,
    "attn-tiny": tiny_attention_shapes,
    **{name: _upstream_factory(name) for name in UPSTREAM_SETS},
}

# op family -> (GPU shape set, CPU shape set)
_DEFAULT_SETS = {
    "grouped_gemm": ("moe", "moe-cpu"),
    "quantize": ("quant", "quant-cpu"),
    "attention": ("attn", "attn-cpu"),
}


def default_shape_set(op: str, gpu: str) -> str:
    """The shape set a campaign of ``op`` uses unless told otherwise: the op family's
    model set on a GPU, its CPU-scaled set on ``cpu``."""
    family = "grouped_gemm" if op.startswith("grouped_gemm") else op
    gpu_set, cpu_set = _DEFAULT_SETS.get(family, ("models", "cpu"))
    return cpu_set if gpu == "cpu" else gpu_set


def shape_set(name: str) -> list[Shape]:
    """A default shape set by name; unknown names fail with the valid ones."""
    try:
        factory = SHAPE_SETS[name]
    except KeyError:
        valid = ", ".join(sorted(SHAPE_SETS))
        raise ConfigError(f"unknown shape set {name!r}; choose one of: {valid}") from None
    return factory()


def shapes_by_label(
    name: str, labels: Sequence[str], what: str = "shapes", hint: str = "", known: bool = False
) -> list[Shape]:
    """The shapes of set ``name`` with these labels, in their order.  A label the set
    lacks is a ConfigError naming ``what``, the missing labels, then ``hint``, and with
    ``known`` the set's labels."""
    by_label = {s.label: s for s in shape_set(name)}
    for label in labels:
        plain = None if label in by_label else plain_shape(label)
        if plain is not None:
            by_label[label] = plain
    missing = [label for label in labels if label not in by_label]
    if missing:
        listed = f"; known: {list(by_label)}" if known else ""
        raise ConfigError(f"{what} not in shape set {name}: {missing}{hint}{listed}")
    return [by_label[label] for label in labels]


def expand_selectors(name: str, wanted: Sequence[str]) -> list[str]:
    """Target labels from ``--shapes`` entries: a label or ``MxNxK`` as given, an
    upstream ``MODEL:GEMM:MBS`` selector (globs allowed) as the labels of the rows of
    set ``name`` it picks, each label once, in the order given."""
    labels: list[str] = []
    for entry in wanted:
        if not is_selector(entry):
            labels.append(entry)
            continue
        if name not in UPSTREAM_SETS:
            sets = ", ".join(UPSTREAM_SETS)
            raise ConfigError(
                f"--shapes {entry!r} selects upstream rows (MODEL:GEMM:MBS); it needs "
                f"--shape-set one of {sets}, not {name}"
            )
        rows = upstream_rows(*UPSTREAM_SETS[name])
        labels += [r.label for r in select_rows(rows, entry)]
    return list(dict.fromkeys(labels))
