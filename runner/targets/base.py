"""Target adapters: what the kernel project is and how to build, test and import it.

Host-side safe: nothing here imports torch or the target package at module level;
``load_api`` is the only worker-side call and imports lazily.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from runner.core.errors import ConfigError, ValueRefused

# The devices a campaign can be measured on: the CPU and the GPU architectures with a
# peak table (runner.judge.peaks).  ``campaign init`` refuses any other --gpu.
KNOWN_GPUS = ("cpu", "gfx942", "gfx950", "sm90")


@dataclass(frozen=True)
class TargetAPI:
    """The target's user API as the op adapters call it (Primus-Turbo's names)."""

    ops: ModuleType
    Format: Any
    ScalingGranularity: Any
    Float8QuantConfig: Any
    ScaleDtype: Any = None  # Primus-Turbo's scale dtypes (FP32, E8M0); None where absent


@dataclass(frozen=True)
class Target:
    """One kernel project.  Subclasses fill the facts; methods derive commands."""

    name: str
    package: str  # import name, e.g. "primus_turbo"
    api_modules: tuple[str, str]  # (ops module, low-precision config module)
    backend_env: dict[str, str]  # op family -> selector variable
    # (op, backend) or (op, backend, granularity) -> kernel files (the latter wins)
    code_map: dict[tuple[str, ...], tuple[str, ...]]
    rebuild_globs: tuple[str, ...] = ()  # changed paths matching these need a rebuild
    # Build files a round's change may touch besides kernel_source (paths or globs;
    # runner.round.judge_files.check_scope refuses any other file).
    build_files: tuple[str, ...] = ()
    editable_install: bool = False
    notes: dict[str, str] = field(default_factory=dict)
    # Compiled modules the package loads (e.g. "primus_turbo.pytorch._C"); the worker
    # proves each was loaded from the tree under test.
    native_modules: tuple[str, ...] = ()
    # The backends whose kernels run on the CPU (--gpu cpu); None: any backend may.
    cpu_backends: tuple[str, ...] | None = None

    def load_api(self) -> TargetAPI:
        """Import the target package (worker side)."""
        ops = importlib.import_module(self.api_modules[0])
        lp = importlib.import_module(self.api_modules[1])
        return TargetAPI(
            ops,
            lp.Format,
            lp.ScalingGranularity,
            lp.Float8QuantConfig,
            getattr(lp, "ScaleDtype", None),
        )

    def kernel_source(self, op: str, backend: str, granularity: str | None = None) -> list[str]:
        b = backend.upper()
        keys: list[tuple[str, ...]] = [(op, b, granularity)] if granularity else []
        for key in [*keys, (op, b)]:
            if key in self.code_map:
                return list(self.code_map[key])
        known = ", ".join(sorted({f"{k[0]}/{k[1]}" for k in self.code_map}))
        raise ConfigError(
            f"target {self.name} has no kernel source for op {op} backend {backend}"
            + (f" granularity {granularity}" if granularity else "")
            + f"; known: {known}"
        )

    def default_backend(self, op: str, granularity: str | None, gpu: str = "") -> str:
        """The backend a campaign gets when ``--backend`` is not given: TRITON, or on
        the CPU the first of ``cpu_backends`` when TRITON cannot run there."""
        if gpu == "cpu" and self.cpu_backends and "TRITON" not in self.cpu_backends:
            return self.cpu_backends[0]
        return "TRITON"

    def check_device(self, backend: str, gpu: str) -> None:
        """Refuse a device the runner cannot measure on, and a backend whose kernels
        cannot run on the CPU (ConfigError naming the valid choices)."""
        if gpu not in KNOWN_GPUS:
            raise ValueRefused(
                f"--gpu {gpu!r} is not a device turbo-campaign can measure on; choose one "
                f"of: {', '.join(KNOWN_GPUS)}"
            )
        allowed = self.cpu_backends
        if gpu == "cpu" and allowed is not None and backend.upper() not in allowed:
            gpus = ", ".join(g for g in KNOWN_GPUS if g != "cpu")
            raise ConfigError(
                f"backend {backend.upper()} of target {self.name} cannot run on the CPU "
                f"(--gpu cpu): on the CPU choose --backend {' or '.join(allowed)}; for "
                f"{backend.upper()} pass the GPU's architecture with --gpu ({gpus})"
            )

    def check_request(self, op: str, granularity: str | None, backend: str) -> None:
        """Refuse an op/granularity/backend the target does not have (ConfigError)."""

    def upstream_files(
        self, op: str, granularity: str | None, backend: str
    ) -> dict[str, list[str]]:
        """Files (a trailing ``/``: folders) of the source tree that the default
        ``test_command``, ``benchmark_command`` and ``kernel_source`` name, keyed by
        those field names; ``campaign init`` checks that the ones it uses exist."""
        return {}

    def selector_env(self, op: str, backend: str) -> dict[str, str]:
        """The backend selector variable for the op family, e.g. PRIMUS_TURBO_GEMM_BACKEND."""
        family = "grouped_gemm" if op.startswith("grouped_gemm") else op.split("_")[0]
        var = self.backend_env.get(family)
        return {var: backend.upper()} if var else {}

    def needs_rebuild(self, changed: list[str]) -> bool:
        return any(
            Path(p).match(g) or p.startswith(g.rstrip("*"))
            for p in changed
            for g in self.rebuild_globs
        )

    def workspace_scaffolding(
        self, op: str, granularity: str | None, backend: str
    ) -> dict[str, list[str]]:
        """The files workspace mode extracts besides the kernels and the package:
        ``tests`` (the focused test and what it imports) and ``bench``."""
        raise ConfigError(f"target {self.name} has no workspace mode; use --mode repo")

    def for_workspace(self, op: str, granularity: str | None, backend: str) -> Target:
        """The target as workspace mode runs it (``execution_mode: workspace``): itself,
        or for a target with native code a variant whose minimal stack needs no build
        (or a ConfigError saying what is missing and what to run instead)."""
        return self

    # Commands a subclass must provide -------------------------------------------------
    def test_command(self, op: str, granularity: str | None, backend: str) -> str:
        raise NotImplementedError

    def benchmark_command(self, op: str, granularity: str | None, backend: str) -> str:
        raise NotImplementedError

    def full_suite_command(self) -> str:
        raise NotImplementedError

    def install_commands(self, gpu_archs: str | None = None) -> list[list[str]]:
        raise NotImplementedError

    def job_env(self, source_dir: Path, op: str, backend: str) -> dict[str, str]:
        raise NotImplementedError

    def build_commands(self, gpu_archs: str | None, *, in_place: bool) -> list[list[str]]:
        """Commands (cwd = the role's tree) that build a target with native code, once
        per build key (``runner.executors.build_cache``).  ``in_place``: build into the
        tree itself, which the worker imports from its working directory (local
        executor); otherwise the image's editable install of the tree (docker).
        Pure-Python targets: none."""
        return []

    def build_env(self, gpu_archs: str | None) -> dict[str, str]:
        """The build's environment (the architectures to compile for, ...)."""
        return {}

    def build_facts(self, env: dict[str, str]) -> dict[str, object]:
        """What the build reads from its environment ``env``, as the target's build
        parses it: part of the build key.  Empty for a target whose build reads none."""
        return {}

    def check_build_facts(self, backend: str, gpu: str) -> None:
        """At init: refuse a backend that the campaign's builds would leave out
        (ConfigError naming the variable that does it)."""

    def check_build(self, root: Path) -> None:
        """Inside the build environment, after the build: raise ConfigError when the
        environment would import another copy of the package than ``root``."""
