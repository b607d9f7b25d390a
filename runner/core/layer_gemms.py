"""The GEMMs of one dense transformer layer, from a model's configuration: one formula
for the default model sets (``runner.core.shapes``) and upstream's benchmark rows
(``runner.core.upstream_shapes``), whose model tables stay apart (each its own source).

Standard library only (both sides).
"""

from __future__ import annotations

from typing import Protocol


class LayerConfig(Protocol):
    """What a layer's GEMMs depend on, by a model configuration's names."""

    @property
    def hidden(self) -> int: ...  # hidden_size
    @property
    def ffn(self) -> int: ...  # intermediate_size
    @property
    def heads(self) -> int: ...  # num_attention_heads
    @property
    def kv_heads(self) -> int: ...  # num_key_value_heads
    @property
    def head_dim(self) -> int: ...


def layer_gemms(model: LayerConfig) -> dict[str, tuple[int, int]]:
    """(N, K) of the four GEMMs of one layer, keyed by role, in a layer's order:
    attention QKV, attention out, MLP gate+up, MLP down."""
    qkv = (model.heads + 2 * model.kv_heads) * model.head_dim
    return {
        "qkv": (qkv, model.hidden),
        "attn_out": (model.hidden, model.hidden),
        "gate_up": (2 * model.ffn, model.hidden),
        "down": (model.hidden, model.ffn),
    }
