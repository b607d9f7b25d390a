"""Primus-Turbo's own GEMM benchmark rows, as data: the shapes its training benchmark
measures, so a campaign's targets are upstream's rows and its CSV scores against them.

Facts read from AMD-AGI/Primus-Turbo at ``a6a16cdce46bd2235a248b41f501fb363c215b9b``
(``UPSTREAM_SHAPES_COMMIT``), never imported from it:

* ``benchmark/ops/training/config.py``: ``DenseModelConfigs`` (the nine dense models
  below), ``gen_gemm_test_cases`` (per model, in this order: attention QKV, attention
  out, MLP gate+up, MLP down, lm_head; each ``[seqlen, N, K]``), ``get_batch_sizes``
  (the sorted union of ``BATCH_SIZE_DEFAULT`` = 1, 2, 4 and the sizes found for
  (GPU key, model, dtype), else the dtype's default, which is 1, 2, 4 too) and
  ``GPU_NAME_MAP`` (MI300X/MI300A/MI308X -> ``MI30*``, MI350X/MI355X -> ``MI35*``);
* ``benchmark/ops/training/batch_size_config.json``: the per-(GPU key, model, dtype)
  batch sizes (crawled from Primus at 71415668), dense models only here;
* ``benchmark/ops/training/bench_gemm_turbo.py``: for each model, each MBS, each GEMM:
  a row ``TestID, Platform, GPU, Case (the model), MBS, M (= seqlen * MBS), N, K,
  Dtype, [Granularity], Check, ...``; TestID counts every case from 1 in that order.

A GPU outside the table (every NVIDIA card: upstream names an H200 ``H200``) runs MBS
1, 2, 4.  Worker-side safe: standard library and ``runner.core`` only.
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import dataclass

from runner.core.errors import ConfigError
from runner.core.layer_gemms import layer_gemms

UPSTREAM_SHAPES_COMMIT = "a6a16cdce46bd2235a248b41f501fb363c215b9b"


@dataclass(frozen=True)
class UpstreamModel:
    """One entry of upstream's ``DenseModelConfigs`` (its field names in comments)."""

    seqlen: int
    hidden: int  # hidden_size
    ffn: int  # intermediate_size
    heads: int  # num_attention_heads
    kv_heads: int  # num_key_value_heads
    head_dim: int
    vocab: int  # vocab_size


# In upstream's dict order, which is the order of its TestIDs.
UPSTREAM_MODELS: dict[str, UpstreamModel] = {
    "Llama-2-7B": UpstreamModel(4096, 4096, 11008, 32, 32, 128, 32000),
    "Llama-2-70B": UpstreamModel(4096, 8192, 28672, 64, 8, 128, 32000),
    "Llama-3.1-8B": UpstreamModel(8192, 4096, 14336, 32, 8, 128, 128256),
    "Llama-3.1-405B": UpstreamModel(8192, 16384, 53248, 128, 8, 128, 128256),
    "Llama-4-17Bx16E": UpstreamModel(4096, 5120, 16384, 40, 8, 128, 202048),
    "Llama-4-17Bx128E": UpstreamModel(4096, 5120, 16384, 40, 8, 128, 202048),
    "Qwen2.5-7B": UpstreamModel(8192, 3584, 18944, 28, 4, 128, 152064),
    "Qwen2.5-72B": UpstreamModel(8192, 8192, 29568, 64, 8, 128, 152064),
    "Mistral-7B": UpstreamModel(4096, 4096, 14336, 32, 8, 128, 32000),
}

# gen_gemm_test_cases's GEMMs, in its order; our names for them.
UPSTREAM_GEMMS = ("qkv", "attn_out", "gate_up", "down", "lm_head")

BATCH_SIZE_DEFAULT = (1, 2, 4)

# batch_size_config.json's entries for the dense models: (GPU key, model, dtype) -> sizes.
BATCH_SIZE_ENTRIES: dict[tuple[str, str, str], tuple[int, ...]] = {
    ("MI30*", "Llama-2-70B", "bf16"): (7,),
    ("MI30*", "Llama-2-70B", "fp8"): (7,),
    ("MI30*", "Llama-2-7B", "bf16"): (4,),
    ("MI30*", "Llama-2-7B", "fp8"): (4,),
    ("MI30*", "Llama-3.1-405B", "bf16"): (1, 2),
    ("MI30*", "Llama-3.1-405B", "fp8"): (1, 2),
    ("MI30*", "Llama-3.1-8B", "bf16"): (2, 4),
    ("MI30*", "Llama-3.1-8B", "fp8"): (2, 5),
    ("MI30*", "Llama-4-17Bx128E", "bf16"): (1, 4),
    ("MI30*", "Llama-4-17Bx128E", "fp8"): (1, 8),
    ("MI30*", "Llama-4-17Bx16E", "bf16"): (1, 4),
    ("MI30*", "Llama-4-17Bx16E", "fp8"): (1, 8),
    ("MI30*", "Qwen2.5-72B", "bf16"): (4,),
    ("MI30*", "Qwen2.5-72B", "fp8"): (4,),
    ("MI30*", "Qwen2.5-7B", "bf16"): (10,),
    ("MI30*", "Qwen2.5-7B", "fp8"): (10,),
    ("MI35*", "Llama-2-70B", "bf16"): (14,),
    ("MI35*", "Llama-2-70B", "fp8"): (7,),
    ("MI35*", "Llama-2-7B", "bf16"): (10,),
    ("MI35*", "Llama-2-7B", "fp8"): (12,),
    ("MI35*", "Llama-3.1-405B", "bf16"): (1, 2),
    ("MI35*", "Llama-3.1-405B", "fp8"): (1, 3),
    ("MI35*", "Llama-3.1-8B", "bf16"): (4, 6),
    ("MI35*", "Llama-3.1-8B", "fp8"): (6, 8),
    ("MI35*", "Llama-4-17Bx128E", "bf16"): (1, 4),
    ("MI35*", "Llama-4-17Bx128E", "fp8"): (1, 8),
    ("MI35*", "Llama-4-17Bx16E", "bf16"): (1, 4),
    ("MI35*", "Llama-4-17Bx16E", "fp8"): (1, 8),
    ("MI35*", "Qwen2.5-72B", "bf16"): (16,),
    ("MI35*", "Qwen2.5-72B", "fp8"): (4,),
    ("MI35*", "Qwen2.5-7B", "bf16"): (16,),
    ("MI35*", "Qwen2.5-7B", "fp8"): (20,),
}

# Our shape-set name -> (upstream's GPU key, dtype); "upstream" is a GPU outside the
# table (H100, H200, ...), where every dtype runs the default sizes.
UPSTREAM_SETS: dict[str, tuple[str, str]] = {
    "upstream": ("", "bf16"),
    "upstream-mi300-bf16": ("MI30*", "bf16"),
    "upstream-mi300-fp8": ("MI30*", "fp8"),
    "upstream-mi355-bf16": ("MI35*", "bf16"),
    "upstream-mi355-fp8": ("MI35*", "fp8"),
}

_DIMS = re.compile(r"^([1-9][0-9]*)x([1-9][0-9]*)x([1-9][0-9]*)$")


def batch_sizes(model: str, gpu_key: str, dtype: str) -> list[int]:
    """The MBS upstream's ``get_batch_sizes`` gives ``model`` on ``gpu_key``/``dtype``."""
    extra = BATCH_SIZE_ENTRIES.get((gpu_key, model, dtype), ())
    return sorted(set(BATCH_SIZE_DEFAULT) | set(extra))


def gemm_dims(model: UpstreamModel) -> dict[str, tuple[int, int]]:
    """(N, K) of each of upstream's five GEMMs of ``model``, in its order: a layer's
    four, then lm_head."""
    return {**layer_gemms(model), "lm_head": (model.vocab, model.hidden)}


@dataclass(frozen=True)
class UpstreamRow:
    """One row of bench_gemm_turbo.py: its Case (the model), GEMM, MBS, M, N, K, TestID."""

    case: str
    gemm: str
    mbs: int
    m: int
    n: int
    k: int
    test_id: int

    @property
    def label(self) -> str:
        """The target label: ``Llama-2-7B-qkv-MBS1-4096x12288x4096``."""
        return f"{self.case}-{self.gemm}-MBS{self.mbs}-{self.m}x{self.n}x{self.k}"


def upstream_rows(gpu_key: str = "", dtype: str = "bf16") -> list[UpstreamRow]:
    """Every row bench_gemm_turbo.py writes on ``gpu_key`` at ``dtype``, in TestID order."""
    rows: list[UpstreamRow] = []
    for case, model in UPSTREAM_MODELS.items():
        for mbs in batch_sizes(case, gpu_key, dtype):
            for gemm, (n, k) in gemm_dims(model).items():
                m = model.seqlen * mbs
                rows.append(UpstreamRow(case, gemm, mbs, m, n, k, len(rows) + 1))
    return rows


def parse_dims(text: str) -> tuple[int, int, int] | None:
    """``MxNxK`` as three positive integers; None for other text."""
    found = _DIMS.match(text)
    if found is None:
        return None
    m, n, k = (int(x) for x in found.groups())
    return m, n, k


def is_selector(text: str) -> bool:
    """``MODEL:GEMM:MBS`` (each part may be ``*`` or a glob) picks upstream rows."""
    return text.count(":") == 2


def _matches(value: str, pattern: str) -> bool:
    return any(fnmatch.fnmatchcase(value, p.strip()) for p in pattern.split("|"))


def select_rows(rows: list[UpstreamRow], selector: str) -> list[UpstreamRow]:
    """The rows that ``MODEL:GEMM:MBS`` picks, in their order: each part a glob, or
    several joined by ``|`` (``Llama-2-7B|Llama-3.1-8B:qkv|down:1``); none picked is a
    ConfigError listing the models, GEMMs and MBS."""
    case, gemm, mbs = (part.strip() or "*" for part in selector.split(":"))
    picked = [
        r
        for r in rows
        if _matches(r.case, case) and _matches(r.gemm, gemm) and _matches(str(r.mbs), mbs)
    ]
    if not picked:
        cases = list(dict.fromkeys(r.case for r in rows))
        sizes = sorted({r.mbs for r in rows})
        raise ConfigError(
            f"--shapes {selector!r} picks none of upstream's rows (MODEL:GEMM:MBS, globs "
            f"allowed); models: {cases}; GEMMs: {list(UPSTREAM_GEMMS)}; MBS: {sizes}"
        )
    return picked
