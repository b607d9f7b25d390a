# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""FP8 linear module (sample modelled on primus_turbo/pytorch/modules/linear_fp8.py)."""

import torch

from primus_turbo.pytorch.ops import gemm_fp8


class Float8Linear(torch.nn.Module):
    def __init__(self, in_features, out_features, config):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features))
        self.config = config

    def forward(self, x):
        return gemm_fp8(x, self.weight, trans_b=True, config=self.config)
