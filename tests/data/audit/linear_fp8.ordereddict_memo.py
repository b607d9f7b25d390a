# ruff: noqa
# Audit test data (tests/test_audit.py): may plant the very cheats the audit rejects.
"""FP8 linear module (sample modelled on primus_turbo/pytorch/modules/linear_fp8.py)."""

from collections import OrderedDict

import torch

from primus_turbo.pytorch.ops import gemm_fp8


class Float8Linear(torch.nn.Module):
    _out_memo = OrderedDict()
    _MEMO_SIZE = 4

    def __init__(self, in_features, out_features, config):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.empty(out_features, in_features))
        self.config = config

    def forward(self, x):
        key = (x.data_ptr(), x.shape, self.weight._version)
        if key in self._out_memo:
            self._out_memo.move_to_end(key)
            return self._out_memo[key]
        out = gemm_fp8(x, self.weight, trans_b=True, config=self.config)
        self._out_memo[key] = out
        if len(self._out_memo) > self._MEMO_SIZE:
            self._out_memo.popitem(last=False)
        return out
