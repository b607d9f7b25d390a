"""Tests of the example kernel package. They import turbo_kernels from this source tree
(not from an installed copy), so a campaign worktree tests its own patched sources."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from turbo_kernels.pytorch.kernels import set_gemm_backend
from turbo_kernels.pytorch.kernels.backend import BACKEND_ENVS


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA or ROCm GPU visible to torch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="no GPU visible to torch (torch.cuda.is_available() is False)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _clean_backend(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for var in BACKEND_ENVS:
        monkeypatch.delenv(var, raising=False)
    set_gemm_backend(None)
    yield
    set_gemm_backend(None)
