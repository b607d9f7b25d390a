"""The campaign manifest (``manifest.yaml``, docs/protocol.md §2): versioned and
validated on every load.

Field order in the model (and therefore in the written YAML) is the order of
docs/protocol.md §2.1 first, then the runner's own fields.  Any validation failure
becomes a ``ConfigError`` whose message names each bad field, its value and the fix.

Upstream's names (the skill page of ``agent/skills/kernel-optimize/``, checked at Primus-Turbo
a6a16cdc) are read as upstream writes them: ``target_op`` spelled op + granularity
(``gemm_fp8_blockwise``: stored as ``target_op: gemm_fp8_blockwise`` with ``granularity:
blockwise``, held in memory as the op ``gemm_fp8``; ``Manifest.upstream_op`` gives it
back), ``execution_mode`` as ``repo``/``workspace`` or ``repo-mode``/``workspace-mode``,
``kernel_source`` as one path or a list, ``project_skill``, ``max_iterations`` below 120
and ``performance_target`` in TFLOPS, GB/s or as a share of peak (``80% of peak``).

Campaign names: ``<op>_<backend lower>_<gpu>_<YYYYMMDD>``.  When a granularity is set
it enters the name as a suffix of the op (``op + "_" + granularity``), so
``gemm_fp8`` + ``blockwise`` + ``TRITON`` + ``gfx942`` gives
``gemm_fp8_blockwise_triton_gfx942_20261129`` (an op that already ends with that
suffix is not suffixed twice).
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, get_args

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic_core import ErrorDetails

from runner.core.errors import CampaignNotFound, ConfigError, RecordDamaged, ValueRefused
from runner.core.files import write_atomic
from runner.core.isa_facts import ARCHS
from runner.core.limits import (
    MAX_BATCH_S,
    MAX_BUDGET_S,
    MAX_ITERS_PER_REPEAT,
    MAX_SIGMA_G,
    MAX_TARGET_RSD,
    MAX_TIMED_REPEATS,
    MAX_WARMUP_S,
    blocks_problem,
    excerpt,
)
from runner.core.timestamps import is_minute_stamp
from runner.core.versions import require_schema_version
from runner.store.yaml_input import load_yaml

MANIFEST_SCHEMA_VERSION = 1

Backend = Literal["TRITON", "CK", "HIPBLASLT", "TURBO", "FLYDSL", "AITER", "HIPKITTENS", "TORCH"]
Lang = Literal["TRITON", "HIP", "FLYDSL", "PYTORCH"]
Granularity = Literal["tensorwise", "rowwise", "blockwise", "mx_blockwise"]
TargetName = Literal["example", "primus-turbo"]
ExecutionMode = Literal["repo", "workspace"]
CacheMode = Literal["hot", "cold"]
# "Forward TFLOPS, Backward TFLOPS": independent metrics, no combined one (upstream's
# comma-separated form, the kernel-optimize skill page at a6a16cdc; docs/protocol.md §5.9)
PrimaryMetric = Literal[
    "Combined Step TFLOPS", "Forward TFLOPS", "Forward GB/s", "Forward TFLOPS, Backward TFLOPS"
]

BACKEND_LANG: dict[str, str] = {
    "TRITON": "TRITON",
    "CK": "HIP",
    "HIPBLASLT": "HIP",
    "TURBO": "HIP",
    "FLYDSL": "FLYDSL",
    "AITER": "HIP",  # AITER's kernels (CK/assembly), called through the target's wrapper
    "HIPKITTENS": "HIP",
    "TORCH": "PYTORCH",
}
# docs/protocol.md §2.1: the fields of upstream's manifest template (Primus-Turbo's
# kernel-optimize skill page, PREPARE_ENVIRONMENT Step 3), in its order (checked at
# a6a16cdc); save_manifest writes these keys first, `init --from-manifest` reads them.
SECTION2_FIELDS = (
    "target_op",
    "target_backend",
    "target_lang",
    "target_gpu",
    "execution_mode",
    "project_skill",
    "performance_target",
    "primary_metric",
    "target_shapes",
    "kernel_source",
    "test_command",
    "benchmark_command",
    "quick_command",
    "representative_shapes",
    "git_commit",
    "git_branch",
    "max_iterations",
    "created",
)

_GPU_RE = re.compile(r"^(gfx\d+[a-z]?|sm\d+|cpu)$")
_HEX40_RE = re.compile(r"^[0-9a-f]{40}$")
_TARGET_RE = re.compile(
    r"^(>=|>)?\s*(\d+(?:\.\d+)?)\s*(?:(TFLOPS|GB/s)|%\s*(?:of\s+)?peak(?:\s+efficiency)?)$",
    re.IGNORECASE,
)
PEAK_SHARE = "% of peak"  # the unit of a performance_target given as a share of peak
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_OP_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_BAD_BRANCH_RE = re.compile(r"(\.\.|[\s~^:?*\[\\]|@\{|//)")


def lang_for_backend(backend: str) -> str:
    """The ``target_lang`` that ``backend`` implies (docs/protocol.md §2.1)."""
    try:
        return BACKEND_LANG[backend.upper()]
    except KeyError:
        raise ValueRefused(
            f"unknown backend {backend!r}; use one of {', '.join(sorted(BACKEND_LANG))}"
        ) from None


def parse_performance_target(text: str) -> tuple[str, float, str]:
    """``">500 TFLOPS"`` -> ``(">", 500.0, "TFLOPS")``, ``"80% of peak"`` -> ``(">=",
    80.0, "% of peak")`` (upstream's forms, a6a16cdc: ``>500 TFLOPS``, ``>60% peak
    efficiency``); no comparison means ``>=``.  ValueError for another form."""
    m = _TARGET_RE.match(text.strip())
    if not m:
        raise ValueError(
            f"performance_target {text!r} has the wrong form; write e.g. '>500 TFLOPS', "
            "'>=3000 GB/s', '80% of peak', or null for none"
        )
    value = float(m.group(2))
    unit = {"tflops": "TFLOPS", "gb/s": "GB/s"}.get((m.group(3) or "").lower(), PEAK_SHARE)
    if unit == PEAK_SHARE and not 0 < value <= 100:
        raise ValueError(
            f"performance_target {text!r}: a share of peak lies in (0, 100]; write e.g. "
            "'80% of peak'"
        )
    return m.group(1) or ">=", value, unit


def split_target_op(op: Any, granularity: Any) -> tuple[Any, Any]:
    """Upstream's ``target_op`` (op + granularity, ``gemm_fp8_blockwise``) -> (op,
    granularity); an op without a granularity suffix comes back unchanged."""
    if not isinstance(op, str):
        return op, granularity
    for g in sorted(get_args(Granularity), key=len, reverse=True):  # mx_blockwise first
        stem = op.removesuffix(f"_{g}")
        if stem == op or not stem:
            continue
        if granularity not in (None, g):
            raise ValueError(
                f"target_op {op!r} names the granularity {g!r} but granularity is "
                f"{granularity!r}; make them agree (or write target_op: {stem})"
            )
        return stem, g
    return op, granularity


def upstream_spellings(data: Mapping[str, object]) -> dict[str, object]:
    """``data`` with upstream's spellings read (module doc): target_op split, ``-mode``
    dropped from execution_mode, a single kernel_source path made a list."""
    out = dict(data)
    out["target_op"], gran = split_target_op(out.get("target_op"), out.get("granularity"))
    if gran is not None:
        out["granularity"] = gran
    mode = out.get("execution_mode")
    if isinstance(mode, str) and mode.endswith("-mode"):
        out["execution_mode"] = mode.removesuffix("-mode")
    if isinstance(out.get("kernel_source"), str):
        out["kernel_source"] = [out["kernel_source"]]
    return {k: v for k, v in out.items() if k in data or v is not None}


def campaign_name(
    op: str, backend: str, gpu: str, date: dt.date | str, granularity: str | None = None
) -> str:
    """``<op>[_<granularity>]_<backend lower>_<gpu>_<YYYYMMDD>``."""
    day = date if isinstance(date, str) else date.strftime("%Y%m%d")
    if not re.fullmatch(r"\d{8}", day):
        raise ConfigError(f"campaign date {day!r} must be YYYYMMDD")
    if granularity and not op.endswith(f"_{granularity}"):
        op = f"{op}_{granularity}"
    return f"{op}_{backend.lower()}_{gpu}_{day}"


class Timing(BaseModel):
    """Timing settings pinned for the campaign (the bench engine reads them)."""

    # every figure is bounded (runner.core.limits) and finite: no round waits forever
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    # minimum timed batches per callable
    repeats: int = Field(default=5, ge=1, le=MAX_TIMED_REPEATS)
    # 0: size each batch to batch_s
    iters_per_repeat: int = Field(default=0, ge=0, le=MAX_ITERS_PER_REPEAT)
    # real work before timing starts
    warmup_s: float = Field(default=0.3, ge=0, le=MAX_WARMUP_S)
    batch_s: float = Field(default=0.05, gt=0, le=MAX_BATCH_S)
    # stop-on-noise target (median's rsd)
    target_rsd: float = Field(default=0.005, gt=0, le=MAX_TARGET_RSD)
    max_repeats: int = Field(default=30, ge=1, le=MAX_TIMED_REPEATS)
    # timed seconds per callable at most
    budget_s: float = Field(default=5.0, gt=0, le=MAX_BUDGET_S)


class Manifest(BaseModel):
    """``manifest.yaml``.  Fields of docs/protocol.md §2.1 come first."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    # docs/protocol.md §2.1, in its order.
    target_op: str
    target_backend: Backend
    target_lang: Lang
    target_gpu: str
    execution_mode: ExecutionMode = "repo"
    # The project skill the loop reads its commands from (upstream's kernel-optimize
    # skill page, a6a16cdc): ``primus-turbo-develop`` for Primus-Turbo.
    project_skill: str | None = Field(default=None, min_length=1)
    performance_target: str | None = None
    primary_metric: PrimaryMetric
    target_shapes: Literal["all"] | list[str] = "all"
    representative_shapes: list[str] = Field(default_factory=list)
    kernel_source: list[str] = Field(default_factory=list)
    test_command: str
    benchmark_command: str
    quick_command: str = ""  # "" until Campaign.init fills in the campaign's path
    # accept's full test suite in upstream's paths; "" is the target's own (for
    # Primus-Turbo upstream's `pytest tests/pytorch/ -v`)
    suite_command: str = ""
    git_commit: bool = True
    git_branch: str = "auto"
    max_iterations: int | None = Field(default=None, ge=1, le=119)
    created: str
    # The runner's own fields.
    schema_version: int = MANIFEST_SCHEMA_VERSION
    campaign_name: str
    target: TargetName = "example"
    source: str
    # The folder this manifest was written for (``Campaign.init``, ``campaign
    # relocate``): a copied or moved folder no longer matches it, and its ``source``
    # may still be the original's repository.  None in campaigns made before it.
    campaign_dir: str | None = None
    base_commit: str | None = None
    granularity: Granularity | None = None
    shape_set: str
    heldout_shapes: list[str] = Field(default_factory=list)
    heldout_seed: int | None = None  # the seed `campaign init` reserved them with
    # A sealed pick (runner.store.sealed): the labels and the seed live in the campaign's
    # sealed/heldout.json, hidden from every job; the manifest holds their count and the
    # digest of that file.  None: unsealed (the labels above, or none).
    heldout_digest: str | None = Field(default=None, pattern=r"^sha256:[0-9a-f]{64}$")
    heldout_count: int = Field(default=0, ge=0)
    pinned_header: str | None = None
    csv_schema: Literal["gemm", "memory", "attention"] = "gemm"
    cache_mode: CacheMode = "hot"
    timing: Timing = Field(default_factory=Timing)
    sigma_g: float | None = None  # checked by _sigma_g
    # Seconds a worker spent on each shape at the baseline (median over its passes):
    # the cost that sharding balances across GPUs.
    shape_seconds: dict[str, float] = Field(default_factory=dict)
    pairs: int = Field(default=1, ge=1)
    executor: Literal["local", "docker", "slurm"] = "local"
    image: str | None = None
    # The local image id (sha256:...) of ``image`` when the campaign was created: the
    # docker executor runs exactly this image, whatever the tag points at later.
    image_id: str | None = None
    # The arch whose ISA facts every round records (docs/analysis.md): None takes
    # target_gpu where the compiler has it, else gfx942 (a manifest without it loads).
    facts_gpu: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _upstream(cls, data: object) -> object:
        return upstream_spellings(data) if isinstance(data, dict) else data

    @property
    def upstream_op(self) -> str:
        """``target_op`` as upstream spells it: op + granularity (``gemm_fp8_blockwise``)."""
        g = self.granularity
        return (
            f"{self.target_op}_{g}"
            if g and not self.target_op.endswith(f"_{g}")
            else self.target_op
        )

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        check_schema_version(v)
        return v

    @field_validator("sigma_g")
    @classmethod
    def _sigma_g(cls, v: float | None) -> float | None:
        if v is not None and not (math.isfinite(v) and 0 < v <= MAX_SIGMA_G):
            raise ValueError(
                "sigma_G is the baseline's relative noise of one sample, a fraction such "
                f"as 0.02 (or 2%): finite, above 0 and at most {MAX_SIGMA_G:g} (100%); "
                "re-run the baseline to measure it"
            )
        return v

    @field_validator("pairs")
    @classmethod
    def _pairs(cls, v: int) -> int:
        problem = blocks_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v

    @field_validator("campaign_name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError("use letters, digits, '.', '_' and '-' only (it names a directory)")
        return v

    @field_validator("target_op")
    @classmethod
    def _op(cls, v: str) -> str:
        if not _OP_RE.match(v):
            raise ValueError("use a lower-case op name such as gemm_fp8 or grouped_gemm")
        return v

    @field_validator("target_gpu")
    @classmethod
    def _gpu(cls, v: str) -> str:
        if not _GPU_RE.match(v):
            raise ValueError(
                "use an architecture code: gfx942 (MI300X/MI325X), gfx950 (MI350X/MI355X), "
                "sm90 (H100/H200), another gfxNNN/smNN code, or cpu"
            )
        return v

    @field_validator("facts_gpu")
    @classmethod
    def _facts_gpu(cls, v: str | None) -> str | None:
        if v is not None and v not in ARCHS:
            known = ", ".join(sorted(ARCHS))
            raise ValueError(f"kernel facts compile for {known}: use one of them")
        return v

    @field_validator("source")
    @classmethod
    def _source(cls, v: str) -> str:
        if not os.path.isabs(v):
            raise ValueError("must be the absolute path of the target git repository")
        return v

    @field_validator("base_commit")
    @classmethod
    def _commit(cls, v: str | None) -> str | None:
        if v is not None and not _HEX40_RE.match(v):
            raise ValueError("must be a full 40-hex commit id (git rev-parse HEAD) or null")
        return v

    @field_validator("performance_target")
    @classmethod
    def _target(cls, v: str | None) -> str | None:
        if v is not None:
            parse_performance_target(v)
            return v.strip()
        return v

    @field_validator("target_shapes", mode="before")
    @classmethod
    def _shapes(cls, v: object) -> object:
        if v == "all":
            return v
        if not isinstance(v, list) or not v or not all(isinstance(s, str) and s for s in v):
            raise ValueError("must be 'all' or a non-empty list of shape labels")
        _no_duplicates(v)
        return v

    @field_validator("representative_shapes")
    @classmethod
    def _representative(cls, v: list[str]) -> list[str]:
        if v and not 3 <= len(v) <= 5:
            raise ValueError(
                f"holds {len(v)} shapes; BASELINE picks 3-5 (leave it empty before BASELINE)"
            )
        _no_duplicates(v)
        return v

    @field_validator("kernel_source")
    @classmethod
    def _kernel_source(cls, v: list[str]) -> list[str]:
        for p in v:
            if os.path.isabs(p) or ".." in Path(p).parts:
                raise ValueError(f"{p!r}: kernel_source paths are relative to source, without ..")
            if not Path(p).parts:
                raise ValueError(
                    f"{p!r} names the whole source tree: list the kernel's own files or "
                    "folders (relative to source), e.g. turbo_kernels/cpu/gemm_fp8.py"
                )
        return v

    @field_validator("git_branch")
    @classmethod
    def _branch(cls, v: str) -> str:
        bad = (
            not v or v.startswith(("-", "/")) or v.endswith(("/", ".lock", "."))
        ) or _BAD_BRANCH_RE.search(v)
        if bad:
            raise ValueError("use 'auto' (optimize/<campaign_name>), 'none', or a valid git branch")
        return v

    @field_validator("created")
    @classmethod
    def _created(cls, v: str) -> str:
        if not is_minute_stamp(v):
            raise ValueError("must be local time 'YYYY-MM-DD HH:MM' (minute precision)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Manifest:
        want = BACKEND_LANG[self.target_backend]
        if self.target_lang != want:
            raise ValueError(
                f"target_lang {self.target_lang!r} does not follow target_backend "
                f"{self.target_backend!r}; set target_lang: {want}"
            )
        _check_metric(self)
        _check_shapes(self)
        return self


def _no_duplicates(labels: list[str]) -> None:
    dup = sorted({s for s in labels if labels.count(s) > 1})
    if dup:
        raise ValueError(f"duplicate shape labels {dup}; list each shape once")


def _check_metric(m: Manifest) -> None:
    memory = m.primary_metric == "Forward GB/s"
    if memory != (m.csv_schema == "memory"):
        want = "memory" if memory else "gemm"
        raise ValueError(
            f"csv_schema {m.csv_schema!r} does not fit primary_metric {m.primary_metric!r}; "
            f"set csv_schema: {want}"
        )
    if m.performance_target is not None:
        unit = parse_performance_target(m.performance_target)[2]
        if unit != PEAK_SHARE and unit not in m.primary_metric:
            raise ValueError(
                f"performance_target {m.performance_target!r} is in {unit} but "
                f"primary_metric is {m.primary_metric!r}; state the target in its unit"
            )


def _check_shapes(m: Manifest) -> None:
    if m.heldout_digest is not None and (m.heldout_shapes or m.heldout_seed is not None):
        raise ValueError(
            "a sealed held-out pick (heldout_digest) lists no heldout_shapes nor "
            "heldout_seed in the manifest: its labels are in sealed/heldout.json"
        )
    overlap = sorted(set(m.representative_shapes) & set(m.heldout_shapes))
    if overlap:
        raise ValueError(
            f"shapes {overlap} are both representative and held out; a held-out shape "
            "is never shown in quick validation: remove it from one list"
        )
    if isinstance(m.target_shapes, list):
        extra = sorted(set(m.representative_shapes) - set(m.target_shapes))
        if extra:
            raise ValueError(
                f"representative_shapes {extra} are not in target_shapes; pick them from "
                "the baseline's PASS rows"
            )


def check_schema_version(version: object) -> None:
    """Raise ValueError (with the fix) unless ``version`` is the supported one."""
    require_schema_version(
        version,
        MANIFEST_SCHEMA_VERSION,
        "",
        older="re-create the campaign with `campaign init`, or update the file to "
        f"docs/protocol.md §2.1 and set schema_version: {MANIFEST_SCHEMA_VERSION}",
        newer="upgrade turbo-campaign to read this campaign",
        error=ValueError,
    )


def branch_name(m: Manifest) -> str | None:
    """The optimisation branch: ``auto`` -> ``optimize/<campaign_name>``, ``none`` -> None."""
    if m.git_branch == "auto":
        return f"optimize/{m.campaign_name}"
    if m.git_branch == "none":
        return None
    return m.git_branch


def format_validation_error(exc: ValidationError, where: str) -> str:
    """One line per bad field: the field, its value and what to do."""
    lines = [f"{where}: invalid manifest ({exc.error_count()} problem(s)):"]
    for err in exc.errors():
        lines.append("  - " + _describe(err, where))
    return "\n".join(lines)


def _describe(err: ErrorDetails, where: str) -> str:
    loc = ".".join(str(p) for p in err["loc"])
    kind = err["type"]
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "missing":
        return f"{loc}: missing; add `{loc}: <value>` to {where} (docs/protocol.md §2.1)"
    if kind == "extra_forbidden":
        valid = ", ".join(Manifest.model_fields)
        return f"{loc} = {excerpt(err['input'])}: unknown field; remove it (valid fields: {valid})"
    if not loc:  # a cross-field check: the message names the fields and the fix
        return msg
    return f"{loc} = {excerpt(err['input'])}: {msg}"


def validate_manifest(data: object, where: str) -> Manifest:
    """Validate a mapping; any problem -> ConfigError naming field, value and fix."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{where}: expected a YAML mapping of manifest fields, got {excerpt(data)}"
        )
    if "schema_version" in data:
        try:
            check_schema_version(data["schema_version"])
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
    try:
        return Manifest.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(format_validation_error(exc, where)) from None


def load_manifest(path: str | os.PathLike[str]) -> Manifest:
    """Read and validate ``manifest.yaml``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CampaignNotFound(
            f"no manifest at {p}; create the campaign with `campaign init` first"
        ) from None
    except UnicodeDecodeError as exc:
        raise RecordDamaged(f"{p}: not UTF-8 text ({exc}); restore the manifest") from None
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read the manifest ({exc.strerror or exc})") from None
    return validate_manifest(load_yaml(text, str(p)), str(p))


def manifest_yaml(m: Manifest) -> str:
    """The YAML text of ``m``: section-2 keys first, then the runner's fields."""
    data = m.model_dump(mode="json") | {"target_op": m.upstream_op}
    ordered = {k: data[k] for k in SECTION2_FIELDS}
    ordered.update((k, v) for k, v in data.items() if k not in ordered)
    head = (
        f"# turbo-campaign manifest (schema_version {MANIFEST_SCHEMA_VERSION}); "
        "validated on every load, see docs/protocol.md §2.1\n"
    )
    return head + yaml.safe_dump(ordered, sort_keys=False, allow_unicode=True, width=1000)


def save_manifest(path: str | os.PathLike[str], m: Manifest) -> None:
    """Write ``m`` atomically (temp file, fsync, rename)."""
    write_atomic(Path(path), manifest_yaml(m))
