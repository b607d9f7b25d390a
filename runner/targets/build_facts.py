"""What Primus-Turbo's ``setup.py`` reads from the environment, parsed as it parses it.

Checked at AMD-AGI/Primus-Turbo a6a16cdc (``setup.py``, ``tools/build_utils.py``):

* ``PRIMUS_TURBO_BUILD_CK``: the CK (ck_tile) GEMM backend; unset means on, ``0``,
  ``false``, ``off`` or empty (any case, stripped) mean off.  Off, the CK kernel sources
  are left out and the host bindings fall back to stubs: a CK round on such a build
  would measure stubs.
* ``PRIMUS_TURBO_FRAMEWORK``: ``;``-separated frameworks, upper-cased (default
  ``PYTORCH``); the PyTorch extension is built only when ``PYTORCH`` is among them.
* ``GPU_ARCHS``: ``;``-separated architectures, stripped, lower-cased, de-duplicated;
  ``native`` (or unset/empty) is the build machine's GPU.  Supported: gfx942, gfx950,
  gfx1250; others are ignored (with a warning).  gfx1250 in the list turns CK off for
  the whole build whatever ``PRIMUS_TURBO_BUILD_CK`` says, and skips the turbo (MFMA)
  kernels: mixed with gfx942/gfx950 it drops them for those archs too.

``facts`` is part of the build key (``runner.executors.build_cache.build_key``), so two
builds that differ in any of these never share a cache entry.  Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

BUILD_CK_ENV = "PRIMUS_TURBO_BUILD_CK"
FRAMEWORK_ENV = "PRIMUS_TURBO_FRAMEWORK"
GPU_ARCHS_ENV = "GPU_ARCHS"
BUILD_VARIABLES = (BUILD_CK_ENV, FRAMEWORK_ENV, GPU_ARCHS_ENV)
SUPPORTED_ARCHS = ("gfx942", "gfx950", "gfx1250")
NATIVE = "native"
_CK_OFF = ("0", "false", "off", "")


def ck_requested(env: Mapping[str, str]) -> bool:
    """``tools/build_utils.build_ck_backend``: on unless set to 0/false/off/empty."""
    value = env.get(BUILD_CK_ENV)
    return value is None or value.strip().lower() not in _CK_OFF


def frameworks(env: Mapping[str, str]) -> tuple[str, ...]:
    """``setup.PRIMUS_TURBO_FRAMEWORK``."""
    return tuple(fw.strip().upper() for fw in env.get(FRAMEWORK_ENV, "PYTORCH").split(";"))


def parse_gpu_archs(text: str | None) -> tuple[str, ...]:
    """``setup.get_offload_archs``' list: ``native`` kept as such (the build machine's
    GPU is not known here), unsupported entries left out as upstream leaves them out."""
    if text is None or not text.strip():
        return (NATIVE,)
    archs: list[str] = []
    for arch in text.split(";"):
        arch = arch.strip().lower()
        if arch not in archs and (arch in SUPPORTED_ARCHS or arch == NATIVE):
            archs.append(arch)
    return tuple(archs)


@dataclass(frozen=True)
class BuildFacts:
    """What a build with a given environment contains."""

    archs: tuple[str, ...]
    ck_requested: bool
    frameworks: tuple[str, ...]

    @property
    def ck(self) -> bool:
        """``setup.ck_backend_enabled``: requested and no gfx1250 in the archs."""
        return self.ck_requested and "gfx1250" not in self.archs

    @property
    def turbo(self) -> bool:
        """The turbo (MFMA) GEMM kernels: skipped for the whole build with gfx1250."""
        return "gfx1250" not in self.archs

    @property
    def torch(self) -> bool:
        return "PYTORCH" in self.frameworks

    def to_dict(self) -> dict[str, object]:
        return {
            GPU_ARCHS_ENV: list(self.archs),
            BUILD_CK_ENV: self.ck_requested,
            FRAMEWORK_ENV: list(self.frameworks),
            "ck_backend": self.ck,
            "turbo_backend": self.turbo,
        }


def build_facts(env: Mapping[str, str]) -> BuildFacts:
    """The facts of a build run with ``env`` (the build's own environment)."""
    return BuildFacts(parse_gpu_archs(env.get(GPU_ARCHS_ENV)), ck_requested(env), frameworks(env))


def missing_backend(facts: BuildFacts, backend: str, gpu: str) -> str | None:
    """Why a build with ``facts`` cannot run ``backend`` on ``gpu`` (None: it can)."""
    if gpu.startswith("gfx") and NATIVE not in facts.archs and gpu not in facts.archs:
        return (
            f"{GPU_ARCHS_ENV}={';'.join(facts.archs) or '(no supported arch)'} does not "
            f"build for the campaign's GPU {gpu}; set {GPU_ARCHS_ENV}={gpu} (or unset it)"
        )
    if not facts.torch:
        return (
            f"{FRAMEWORK_ENV}={';'.join(facts.frameworks)} leaves the PyTorch extension "
            f"out; set {FRAMEWORK_ENV}=PYTORCH (or unset it)"
        )
    if backend == "CK" and not facts.ck:
        if not facts.ck_requested:
            return (
                f"{BUILD_CK_ENV} is off, so the CK bindings are stubs; unset it or set "
                f"{BUILD_CK_ENV}=1"
            )
        return f"{GPU_ARCHS_ENV} holds gfx1250, which turns CK off for the whole build"
    if backend == "TURBO" and not facts.turbo:
        return f"{GPU_ARCHS_ENV} holds gfx1250, which skips the turbo (MFMA) kernels"
    return None
