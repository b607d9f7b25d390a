"""GEMM backend selection, modelled on Primus-Turbo's ``PRIMUS_TURBO_GEMM_BACKEND``.

Priority, highest first: the code setter ``set_gemm_backend``, the environment variable
``TURBO_KERNELS_GEMM_BACKEND``, the default (TRITON when a GPU is visible to torch,
``triton`` is installed and the tensors are on the GPU; TORCH otherwise). An explicit
TRITON on a machine without a GPU, or without triton, raises ``BackendUnavailableError``.

A value is either one backend for every precision (``TRITON``, ``TORCH``) or a
per-precision list such as ``fp8:TRITON,other:TORCH`` (precisions: ``fp8``, ``other``).
Precisions a list leaves out fall through to the next source.
"""

from __future__ import annotations

import importlib.util
import os
from enum import Enum

import torch

__all__ = [
    "ATTENTION_BACKEND_ENV",
    "BACKEND_ENVS",
    "GEMM_BACKEND_ENV",
    "GROUPED_GEMM_BACKEND_ENV",
    "QUANTIZE_BACKEND_ENV",
    "BackendType",
    "BackendUnavailableError",
    "PrecisionType",
    "default_gemm_backend",
    "get_backend",
    "get_gemm_backend",
    "parse_backend_spec",
    "set_gemm_backend",
]

GEMM_BACKEND_ENV = "TURBO_KERNELS_GEMM_BACKEND"
# one selector variable per op family, as Primus-Turbo's PRIMUS_TURBO_*_BACKEND
GROUPED_GEMM_BACKEND_ENV = "TURBO_KERNELS_GROUPED_GEMM_BACKEND"
QUANTIZE_BACKEND_ENV = "TURBO_KERNELS_QUANTIZE_BACKEND"
ATTENTION_BACKEND_ENV = "TURBO_KERNELS_ATTENTION_BACKEND"
BACKEND_ENVS = (GEMM_BACKEND_ENV, GROUPED_GEMM_BACKEND_ENV, QUANTIZE_BACKEND_ENV,
                ATTENTION_BACKEND_ENV)  # fmt: skip


class BackendType(Enum):
    TRITON = "TRITON"
    TORCH = "TORCH"


class PrecisionType(Enum):
    FP8 = "fp8"
    OTHER = "other"  # bf16 / fp16 / fp32


class BackendUnavailableError(RuntimeError):
    """A backend was requested that cannot run on this machine."""


_code_backend: dict[PrecisionType, BackendType] = {}


def _parse_backend(name: str, source: str) -> BackendType:
    try:
        return BackendType[name.strip().upper()]
    except KeyError:
        valid = ", ".join(b.name for b in BackendType)
        raise ValueError(
            f"unknown GEMM backend {name.strip()!r} in {source}; valid: {valid}"
        ) from None


def parse_backend_spec(spec: str, source: str = "backend spec") -> dict[PrecisionType, BackendType]:
    """``"TRITON"`` -> every precision; ``"fp8:TRITON,other:TORCH"`` -> per precision."""
    if ":" not in spec:
        backend = _parse_backend(spec, source)
        return dict.fromkeys(PrecisionType, backend)
    result: dict[PrecisionType, BackendType] = {}
    for item in spec.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition(":")
        try:
            precision = PrecisionType(key.strip().lower())
        except ValueError:
            valid = ", ".join(p.value for p in PrecisionType)
            raise ValueError(
                f"unknown precision {key.strip()!r} in {source} {spec!r}; valid: {valid}"
            ) from None
        if not sep:
            raise ValueError(f"expected precision:BACKEND in {source}, got {item!r}")
        result[precision] = _parse_backend(value, source)
    return result


def set_gemm_backend(backend: str | BackendType | None) -> None:
    """Select the GEMM backend from code (beats the environment variable).

    ``None`` clears the setting; a ``BackendType`` or a name applies to every precision;
    ``"fp8:TRITON,other:TORCH"`` sets precisions one by one.
    """
    _code_backend.clear()
    if backend is None:
        return
    if isinstance(backend, BackendType):
        _code_backend.update(dict.fromkeys(PrecisionType, backend))
    else:
        _code_backend.update(parse_backend_spec(backend, "set_gemm_backend"))


def _triton_installed() -> bool:
    return importlib.util.find_spec("triton") is not None


def default_gemm_backend(device: torch.device | None = None) -> BackendType:
    """TRITON when a GPU is visible and triton is installed (and the tensors, if a device is
    given, are on the GPU); TORCH otherwise."""
    on_gpu = device is None or device.type == "cuda"
    if on_gpu and torch.cuda.is_available() and _triton_installed():
        return BackendType.TRITON
    return BackendType.TORCH


def _check_available(backend: BackendType, source: str) -> None:
    if backend is not BackendType.TRITON:
        return
    if not torch.cuda.is_available():
        raise BackendUnavailableError(
            f"GEMM backend TRITON requested ({source}) but no GPU is visible to torch "
            "(torch.cuda.is_available() is False); use TORCH on this machine"
        )
    if not _triton_installed():
        raise BackendUnavailableError(
            f"GEMM backend TRITON requested ({source}) but the 'triton' package is not "
            "installed; pip install 'turbo-example-kernels[triton]' or use TORCH"
        )


def get_gemm_backend(
    precision: PrecisionType = PrecisionType.OTHER, device: torch.device | None = None
) -> BackendType:
    """The backend for ``precision``: setter, then environment variable, then default
    (for tensors on ``device``)."""
    return get_backend(GEMM_BACKEND_ENV, precision, device)


def get_backend(
    env_var: str,
    precision: PrecisionType = PrecisionType.OTHER,
    device: torch.device | None = None,
) -> BackendType:
    """The backend of the op family whose selector variable is ``env_var``: the code
    setter (shared by every family), then ``env_var``, then the default."""
    if precision in _code_backend:
        backend, source = _code_backend[precision], "set_gemm_backend"
    else:
        env = os.environ.get(env_var, "").strip()
        source = f"{env_var}={env}"
        from_env = parse_backend_spec(env, env_var) if env else {}
        if precision in from_env:
            backend = from_env[precision]
        else:
            return default_gemm_backend(device)
    _check_available(backend, source)
    return backend
