"""Fixture: attention, on the AITER kernels."""

from primus_turbo.pytorch.kernels.attention.attention_impl import attention_impl

__all__ = ["flash_attn_func"]
flash_attn_func = attention_impl
