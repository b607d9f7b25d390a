from __future__ import annotations

import pytest
import torch

from turbo_kernels.pytorch.kernels import (
    GEMM_BACKEND_ENV,
    BackendType,
    BackendUnavailableError,
    PrecisionType,
    backend,
    get_gemm_backend,
    set_gemm_backend,
)
from turbo_kernels.pytorch.ops import gemm, gemm_fp8

FP8, OTHER = PrecisionType.FP8, PrecisionType.OTHER


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolution only: pretend a GPU and triton exist (nothing is launched)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(backend, "_triton_installed", lambda: True)


def test_default_is_torch_without_gpu(no_gpu: None) -> None:
    assert get_gemm_backend(FP8) is BackendType.TORCH
    assert get_gemm_backend(OTHER) is BackendType.TORCH


def test_default_is_triton_with_gpu_and_triton(fake_gpu: None) -> None:
    assert get_gemm_backend(FP8) is BackendType.TRITON


def test_default_is_torch_without_triton(fake_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(backend, "_triton_installed", lambda: False)
    assert get_gemm_backend(FP8) is BackendType.TORCH


def test_env_var_single_value(fake_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GEMM_BACKEND_ENV, "torch")
    assert get_gemm_backend(FP8) is BackendType.TORCH
    assert get_gemm_backend(OTHER) is BackendType.TORCH


def test_env_var_per_precision(fake_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GEMM_BACKEND_ENV, "fp8:TORCH,other:TRITON")
    assert get_gemm_backend(FP8) is BackendType.TORCH
    assert get_gemm_backend(OTHER) is BackendType.TRITON
    monkeypatch.setenv(GEMM_BACKEND_ENV, "other:TORCH")  # fp8 falls through to the default
    assert get_gemm_backend(FP8) is BackendType.TRITON
    assert get_gemm_backend(OTHER) is BackendType.TORCH


def test_setter_beats_env_var(no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(GEMM_BACKEND_ENV, "TRITON")
    with pytest.raises(BackendUnavailableError):
        get_gemm_backend(FP8)
    set_gemm_backend("TORCH")
    assert get_gemm_backend(FP8) is BackendType.TORCH
    set_gemm_backend("fp8:TORCH")  # per precision: other falls through to the env var
    assert get_gemm_backend(FP8) is BackendType.TORCH
    with pytest.raises(BackendUnavailableError):
        get_gemm_backend(OTHER)
    set_gemm_backend(BackendType.TORCH)
    assert get_gemm_backend(OTHER) is BackendType.TORCH
    set_gemm_backend(None)
    with pytest.raises(BackendUnavailableError):
        get_gemm_backend(OTHER)


@pytest.mark.parametrize("spec", ["CK", "fp8:CUTLASS", "fp4:TORCH", "fp8"])
def test_unknown_backend_is_a_clear_error(spec: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match=r"unknown|expected"):
        set_gemm_backend(spec)
    monkeypatch.setenv(GEMM_BACKEND_ENV, spec)
    with pytest.raises(ValueError, match=GEMM_BACKEND_ENV):
        get_gemm_backend(FP8)


def test_triton_without_gpu_is_a_clear_error(no_gpu: None, monkeypatch: pytest.MonkeyPatch) -> None:
    a = torch.randn(16, 32, dtype=torch.bfloat16)
    b = torch.randn(24, 32, dtype=torch.bfloat16)
    set_gemm_backend("TRITON")
    with pytest.raises(BackendUnavailableError, match=r"set_gemm_backend.*no GPU"):
        gemm_fp8(a, b, trans_b=True)
    set_gemm_backend(None)
    monkeypatch.setenv(GEMM_BACKEND_ENV, "fp8:TRITON,other:TORCH")
    with pytest.raises(BackendUnavailableError, match=f"{GEMM_BACKEND_ENV}.*no GPU"):
        gemm_fp8(a, b, trans_b=True)
    assert gemm(a, b, trans_b=True).shape == (16, 24)


def test_triton_without_triton_is_a_clear_error(
    fake_gpu: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backend, "_triton_installed", lambda: False)
    set_gemm_backend("TRITON")
    with pytest.raises(BackendUnavailableError, match="triton"):
        get_gemm_backend(FP8)


def test_default_is_torch_for_cpu_tensors_even_with_gpu(fake_gpu: None) -> None:
    assert get_gemm_backend(FP8, torch.device("cpu")) is BackendType.TORCH
    assert get_gemm_backend(FP8, torch.device("cuda", 0)) is BackendType.TRITON
    a = torch.randn(16, 32, dtype=torch.bfloat16)
    assert gemm_fp8(a, a, trans_b=True).shape == (16, 16)
