"""Fixture: attention on AITER (an external package)."""

import aiter


def attention_impl(q, k, v):
    return aiter.flash_attn_func(q, k, v)
