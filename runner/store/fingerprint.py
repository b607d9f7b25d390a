"""The environment fingerprint: what machine, GPU and software a measurement ran on.

``collect_fingerprint()`` returns a plain dict (``schema_version`` 1) that a round
records next to its results, the way asv's ``Machine`` records a host, extended with
the GPU, driver, ROCm/CUDA, image digest and library versions.  Every source is
optional: a missing or failing tool leaves its fields ``None``, and ``tools`` says
which tools answered.  ``compare_fingerprints`` and ``require_comparable`` decide
whether two measurements may be compared: a difference in a performance-relevant
field (``is_perf_relevant``) blocks unless the user gives a reason.

Layout (every leaf may be ``None``)::

    schema_version: 1
    collected: ISO 8601 UTC timestamp
    host:     {hostname, kernel, cpu_model, numa_balancing}
    gpu:      {vendor, model, architecture, count, driver_version, vbios, firmware,
               sclk_mhz, mclk_mhz, power_cap_w, perf_level, compute_mode}
    software: {rocm_version, rocm_root, hip_version, hipblaslt_version, cuda_version,
               torch_version, torch_git_version, torch_hip, torch_cuda,
               triton_version, python}
    image_digest: the container image's digest
    env:      {NAME: value} for the variables in ENV_PATTERN
    extra:    what the caller passed (the target package's name, version, commit)
    tools:    {tool: "ok" | "missing" | "failed"}
"""

from __future__ import annotations

import ast
import dataclasses
import datetime as dt
import importlib.metadata
import importlib.util
import logging
import os
import platform
import re
import shutil
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from runner.core import processes
from runner.core.errors import (
    CampaignError,
    CommandFailed,
    ConfigError,
    FingerprintMismatch,
    InfrastructureError,
)
from runner.core.files import write_atomic
from runner.core.versions import require_schema_version
from runner.store import fingerprint_parsers as fpp

log = logging.getLogger("runner.store.fingerprint")

SCHEMA_VERSION = 1

ENV_PATTERN = re.compile(
    r"^(HSA_|HIP_|ROCR_|PRIMUS_TURBO_|TRITON_|TURBO_KERNELS_).*"
    r"|^(CUDA_VISIBLE_DEVICES|ROCR_VISIBLE_DEVICES|HIP_VISIBLE_DEVICES)$"
)

PERF_KEYS: frozenset[str] = frozenset(
    {
        "gpu.vendor",
        "gpu.model",
        "gpu.architecture",
        "gpu.driver_version",
        "gpu.power_cap_w",
        "gpu.perf_level",
        "software.rocm_version",
        "software.hip_version",
        "software.hipblaslt_version",
        "software.cuda_version",
        "software.torch_version",
        "software.torch_git_version",
        "software.torch_hip",
        "software.torch_cuda",
        "software.triton_version",
        "image_digest",
    }
)
"""Fields whose difference makes two measurements incomparable.  Not in it, by
design: the target's version and commit (``extra``: incumbent and candidate differ
by construction), the GPU count (one kernel runs on one GPU), clock readings (a
sample, not a setting), VBIOS/firmware, host facts and timestamps.  Environment
variables count too, see ``is_perf_relevant``."""

ENV_NOT_PERF: frozenset[str] = frozenset(
    {"TRITON_CACHE_DIR", "TRITON_HOME", "TRITON_DUMP_DIR", "TRITON_OVERRIDE_DIR"}
)
"""Matched variables that only move files or pick a device; all others matched by
ENV_PATTERN (e.g. ``PRIMUS_TURBO_*`` backend switches, ``HSA_*``) are
performance-relevant."""

IGNORED_KEYS: frozenset[str] = frozenset({"collected", "schema_version"})
"""Never reported as differences: they differ between any two collections."""

OVERRIDE_FLAG = "--allow-env-mismatch"

_TOOL_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class FingerprintDiff:
    """One field that differs between fingerprint ``a`` and ``b`` (dotted ``key``;
    ``None`` where a fingerprint lacks the field)."""

    key: str
    a: object
    b: object
    perf_relevant: bool

    def to_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)


def mismatch(diffs: list[FingerprintDiff]) -> FingerprintMismatch:
    """The error for ``diffs``, performance-relevant fields that differ: each with both
    values, and the way to compare anyway."""
    lines = "\n".join(f"  {d.key}: {_show(d.a)} vs {_show(d.b)}" for d in diffs)
    return FingerprintMismatch(
        f"the environments differ in {len(diffs)} performance-relevant field(s):\n{lines}\n"
        "Measure both on the same environment, or pass "
        f"{OVERRIDE_FLAG} REASON to compare anyway (the reason is recorded).",
        diffs,
    )


# --------------------------------------------------------------------------- collect


def collect_fingerprint(
    *, image_digest: str | None = None, extra: Mapping[str, object] | None = None
) -> dict[str, object]:
    """Fingerprint this machine.  Never fails for a missing tool or library: their
    fields are ``None`` and ``tools`` says why."""
    tools: dict[str, str] = {}
    fp: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "collected": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": _host(),
        "gpu": _gpu(tools),
        "software": _software(tools),
        "image_digest": image_digest,
        "env": collect_env(os.environ),
        "extra": dict(extra) if extra else {},
        "tools": tools,
    }
    return fp


def collect_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables that steer the GPU runtime, Triton and the targets, sorted."""
    return {k: environ[k] for k in sorted(environ) if ENV_PATTERN.match(k)}


def image_digest(image: str) -> str:
    """The local image id (``sha256:...``) of ``image``: the fingerprint's image digest,
    and what the docker executor records of the image a job ran in."""
    try:
        argv = ["docker", "image", "inspect", "--format", "{{.Id}}", image]
        return processes.run(argv).stdout.strip()
    except CommandFailed as exc:
        raise InfrastructureError(
            f"cannot read the id of image {image}: {exc}\nBuild it (`campaign image`, "
            "`make image`) or pull it, and check that the Docker daemon answers (`docker info`)."
        ) from exc


def _tool(tools: dict[str, str], *argv: str) -> str | None:
    """The output of ``argv``, or ``None`` (and why, in ``tools``) when the tool is
    missing or fails.  Goes through ``runner.core.processes.run`` like every subprocess."""
    name = " ".join(a for a in argv[:2] if not a.startswith("--query"))
    if shutil.which(argv[0]) is None:
        tools[name] = "missing"
        return None
    try:
        proc = processes.run(list(argv), check=False, timeout=_TOOL_TIMEOUT_S)
    except (CampaignError, OSError) as exc:
        log.debug("%s failed: %s", name, exc)
        tools[name] = "failed"
        return None
    tools[name] = "ok" if proc.returncode == 0 else f"failed (exit {proc.returncode})"
    return proc.stdout if proc.returncode == 0 else None


def _read(path: str | os.PathLike[str]) -> str | None:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _host() -> dict[str, object]:
    numa = fpp.first_line(_read("/proc/sys/kernel/numa_balancing"))
    return {
        "hostname": socket.gethostname() or None,
        "kernel": platform.release() or None,
        "cpu_model": fpp.parse_cpuinfo(_read("/proc/cpuinfo") or "")
        or platform.processor()
        or None,
        "numa_balancing": int(numa) if numa and numa.isdigit() else None,
    }


# --------------------------------------------------------------------------- GPU

_GPU_KEYS = (
    "vendor",
    "model",
    "architecture",
    "count",
    "driver_version",
    "vbios",
    "firmware",
    "sclk_mhz",
    "mclk_mhz",
    "power_cap_w",
    "perf_level",
    "compute_mode",
)


def _gpu(tools: dict[str, str]) -> dict[str, object]:
    """AMD first (amd-smi, rocminfo), then NVIDIA (nvidia-smi); all ``None`` when
    neither finds a GPU.  Per-device fields describe the lowest-numbered GPU."""
    found = _amd_gpu(tools) or _nvidia_gpu(tools) or {}
    return {k: found.get(k) for k in _GPU_KEYS}


def _amd_gpu(tools: dict[str, str]) -> dict[str, object] | None:
    static = fpp.parse_amd_smi_static(_tool(tools, "amd-smi", "static", "--json") or "")
    rocminfo = fpp.parse_rocminfo(_tool(tools, "rocminfo") or "")
    agents = rocminfo["gpus"]
    if not static and not agents:
        return None
    metric = fpp.parse_amd_smi_metric(_tool(tools, "amd-smi", "metric", "--json") or "")
    firmware = fpp.parse_amd_smi_firmware(_tool(tools, "amd-smi", "firmware", "--json") or "")
    first = static[0] if static else {}
    agent: Mapping[str, object] = agents[0] if agents else {}
    return {
        "vendor": "AMD",
        **(metric[0] if metric else {}),
        **{k: v for k, v in first.items() if v is not None},
        "model": first.get("model") or agent.get("model"),
        "architecture": first.get("architecture") or agent.get("architecture"),
        "count": len(static) or len(agents),
        "driver_version": first.get("driver_version")
        or fpp.first_line(_read("/sys/module/amdgpu/version"))
        or rocminfo["rock_version"],
        "firmware": firmware[0]["firmware"] if firmware else None,
    }


def _nvidia_gpu(tools: dict[str, str]) -> dict[str, object] | None:
    query = f"--query-gpu={fpp.NVIDIA_QUERY}"
    out = _tool(tools, "nvidia-smi", f"{query},compute_cap", "--format=csv,noheader")
    if out is None:  # drivers older than ~510 do not know compute_cap
        out = _tool(tools, "nvidia-smi", query, "--format=csv,noheader")
    gpus = fpp.parse_nvidia_smi(out or "")
    if not gpus:
        return None
    return {"vendor": "NVIDIA", **gpus[0], "count": len(gpus)}


# --------------------------------------------------------------------------- software


def _software(tools: dict[str, str]) -> dict[str, object]:
    root = _rocm_root(tools)
    return {
        "rocm_version": _rocm_version(tools, root),
        "rocm_root": str(root) if root else None,
        "hip_version": _header_version(root, "hip/hip_version.h", "HIP_VERSION_", "GITHASH"),
        "hipblaslt_version": _header_version(
            root, "hipblaslt/hipblaslt-version.h", "HIPBLASLT_VERSION_", "TWEAK"
        ),
        "cuda_version": _cuda_version(tools),
        **_torch(),
        "triton_version": dist_version("triton", "pytorch-triton-rocm", "pytorch-triton"),
        "python": platform.python_version(),
    }


def _rocm_root(tools: dict[str, str]) -> Path | None:
    """TheRock's ``rocm-sdk path --root``, else ``$ROCM_PATH``, else ``/opt/rocm``."""
    candidates = [
        fpp.first_line(_tool(tools, "rocm-sdk", "path", "--root")),
        os.environ.get("ROCM_PATH"),
        "/opt/rocm",
    ]
    for c in candidates:
        if c and Path(c).is_dir():
            return Path(c)
    return None


def _rocm_version(tools: dict[str, str], root: Path | None) -> str | None:
    sdk = fpp.first_line(_tool(tools, "rocm-sdk", "version"))
    if sdk:
        return sdk
    return fpp.first_line(_read(root / ".info" / "version")) if root else None


def _header_version(root: Path | None, rel: str, prefix: str, extra: str) -> str | None:
    text = _read(root / "include" / rel) if root else None
    return fpp.parse_version_header(text, prefix, extra) if text else None


def _cuda_version(tools: dict[str, str]) -> str | None:
    if shutil.which("nvidia-smi") is None:
        return None
    return fpp.parse_nvidia_smi_version(_tool(tools, "nvidia-smi", "--version") or "")[
        "cuda_version"
    ]


def dist_version(*names: str) -> str | None:
    """The installed version of the first of ``names`` that is installed; None if none."""
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


_TORCH_FIELDS = {
    "torch_version": "__version__",
    "torch_git_version": "git_version",
    "torch_hip": "hip",
    "torch_cuda": "cuda",
}


def _torch() -> dict[str, object]:
    """torch's version and build: read from the ``torch/version.py`` it would import
    (``_torch_version_file``: no import, which takes seconds of a round's start), else
    imported in-process; all ``None`` without torch."""
    return _torch_version_file() or _torch_imported()


def _torch_version_file() -> dict[str, object] | None:
    """The fields of ``_TORCH_FIELDS`` as ``torch/version.py`` assigns them (the values
    ``torch.__version__`` and ``torch.version`` hold once imported), without importing
    torch; None when the file is not there or assigns one of them otherwise than as a
    constant."""
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    text = _read(Path(folders[0]) / "version.py") if folders else None
    if text is None:
        return None
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    values: dict[str, object] = {}
    for node in tree.body:
        target: ast.expr | None = node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            values[target.id] = value.value
    if not all(name in values for name in _TORCH_FIELDS.values()):
        return None
    return {key: str(v) if (v := values[name]) else None for key, name in _TORCH_FIELDS.items()}


def _torch_imported() -> dict[str, object]:
    """torch's version and build, imported in-process; all ``None`` without torch."""
    found: dict[str, object] = dict.fromkeys(_TORCH_FIELDS)
    try:
        import torch  # optional and slow to import: only when collecting
    except Exception as exc:  # an unimportable torch is "unknown", never a crash
        log.debug("torch not importable: %s", exc)
        return found
    version = getattr(torch, "version", None)
    found["torch_version"] = str(torch.__version__)
    for key, attr in (
        ("torch_git_version", "git_version"),
        ("torch_hip", "hip"),
        ("torch_cuda", "cuda"),
    ):
        value = getattr(version, attr, None)
        found[key] = str(value) if value else None
    return found


# --------------------------------------------------------------------------- files


def write_fingerprint(path: str | os.PathLike[str], fp: Mapping[str, object]) -> None:
    """Write ``fp`` as YAML, atomically (``runner.core.files.write_atomic``)."""
    p = Path(path)
    try:
        text = yaml.safe_dump(dict(fp), sort_keys=False, default_flow_style=False)
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"cannot write fingerprint {p}: {exc}; pass only plain values "
            "(str, int, float, bool, None, lists, dicts) in extra"
        ) from exc
    write_atomic(p, text)


def load_fingerprint(path: str | os.PathLike[str]) -> dict[str, object]:
    """Read a fingerprint written by ``write_fingerprint``; a missing file, bad YAML
    or another ``schema_version`` fails with what to do."""
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"cannot read fingerprint {p}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise ConfigError(
            f"fingerprint {p} is not valid YAML: {exc}; delete it and re-collect"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"fingerprint {p} is not a mapping; delete it and re-collect")
    _check_version(p, data.get("schema_version"))
    return data


def _check_version(p: Path, version: object) -> None:
    require_schema_version(
        version,
        SCHEMA_VERSION,
        f"fingerprint {p}",
        older="re-collect it on the machine that measured, or read it with the "
        "turbo-campaign release that wrote it",
        newer="upgrade turbo-campaign (pip install -U turbo-campaign) to read it",
    )


# --------------------------------------------------------------------------- compare


def is_perf_relevant(key: str) -> bool:
    """Whether a difference in dotted ``key`` blocks a comparison: ``PERF_KEYS``, and
    ``env.NAME`` unless NAME only places files or picks devices."""
    if key in PERF_KEYS:
        return True
    if key.startswith("env."):
        name = key[len("env.") :]
        return name not in ENV_NOT_PERF and not name.endswith("_VISIBLE_DEVICES")
    return False


def flatten(fp: Mapping[str, object], prefix: str = "") -> dict[str, object]:
    """``{"gpu": {"model": m}}`` -> ``{"gpu.model": m}``; lists stay values."""
    flat: dict[str, object] = {}
    for k, v in fp.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping) and v:
            flat.update(flatten(v, f"{key}."))
        else:
            flat[key] = v if not isinstance(v, Mapping) else None
    return flat


def compare_fingerprints(a: Mapping[str, object], b: Mapping[str, object]) -> list[FingerprintDiff]:
    """Every field that differs, sorted with the performance-relevant ones first."""
    fa, fb = flatten(a), flatten(b)
    diffs = [
        FingerprintDiff(k, fa.get(k), fb.get(k), is_perf_relevant(k))
        for k in sorted(fa.keys() | fb.keys())
        if k not in IGNORED_KEYS and fa.get(k) != fb.get(k)
    ]
    return sorted(diffs, key=lambda d: not d.perf_relevant)


def require_comparable(
    a: Mapping[str, object], b: Mapping[str, object], *, override_reason: str | None = None
) -> list[FingerprintDiff]:
    """The differences between ``a`` and ``b``; raises ``FingerprintMismatch`` when a
    performance-relevant one exists and no ``override_reason`` is given (the caller
    records the reason with the returned diffs)."""
    diffs = compare_fingerprints(a, b)
    blocking = [d for d in diffs if d.perf_relevant]
    if blocking and not (override_reason and override_reason.strip()):
        raise mismatch(blocking)
    if blocking:
        log.warning(
            "comparing despite %d environment difference(s): %s", len(blocking), override_reason
        )
    return diffs


def _show(value: object) -> str:
    return "<missing>" if value is None else str(value)
