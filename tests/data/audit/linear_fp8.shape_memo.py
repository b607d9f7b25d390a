# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""FP8 linear module (sample modelled on primus_turbo/pytorch/modules/linear_fp8.py)."""

import torch

from primus_turbo.pytorch.ops import gemm_fp8

_OUT_BY_SHAPE = {}


class Float8Linear(torch.nn.Module):
    def __init__(self, in_features, out_features, config):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features))
        self.config = config

    def forward(self, x):
        key = (tuple(x.shape), x.dtype)
        if key not in _OUT_BY_SHAPE:
            out = gemm_fp8(x, self.weight, trans_b=True, config=self.config)
            _OUT_BY_SHAPE[key] = out
        return _OUT_BY_SHAPE[key]
