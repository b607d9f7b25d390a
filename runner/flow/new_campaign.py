"""Creating a campaign: the manifest filled from the target adapter's facts (kernel
source, focused test and benchmark commands) and the source tree's HEAD as the base
commit.  ``campaign init`` and ``campaign baseline --op ...`` both come here."""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runner.core.csv_schema import COMBINED_STEP, FORWARD_GBPS
from runner.core.errors import ConfigError, ValueRefused
from runner.core.op_info import op_info
from runner.core.processes import GIT_TOOL_COMMIT, run
from runner.core.shapes import default_shape_set, expand_selectors, shape_set, shapes_by_label
from runner.core.timestamps import now_minute
from runner.judge.memory_fit import refuse_unfit, unfit_shapes
from runner.judge.representative import reserve_heldout
from runner.store.campaign import Campaign, check_campaigns_root
from runner.store.lineage import Lineage
from runner.store.manifest import (
    MANIFEST_SCHEMA_VERSION,
    Manifest,
    campaign_name,
    lang_for_backend,
    split_target_op,
    validate_manifest,
)
from runner.store.sealed import Sealed, write_sealed
from runner.store.upstream_manifest import PROJECT_SKILLS
from runner.store.upstream_quick import copy_template
from runner.targets.base import Target
from runner.targets.registry import get_target


def examples_dir() -> Path:
    """The bundled example package: ``runner/_examples/`` in an installed wheel (the
    build copies it there, see setup.py), else ``examples/`` of the source checkout."""
    package = Path(__file__).resolve().parents[1]  # runner/
    bundled = package / "_examples"
    return bundled if bundled.is_dir() else package.parent / "examples"


EXAMPLES_DIR = examples_dir()


def default_metric(op: str) -> str:
    """The op's own primary metric (``OpInfo.primary_metric``: Forward GB/s for a
    memory-bound op, the combined forward+backward step for the GEMM-class training
    ops); an unknown op fails later, in validate_manifest."""
    try:
        return op_info(op).primary_metric
    except ValueRefused:
        return COMBINED_STEP


def _default_schema(op: str, metric: str) -> str:
    """The op's own CSV schema (the attention schema for attention); otherwise the one
    the metric implies."""
    if metric == FORWARD_GBPS:
        return "memory"
    try:
        return op_info(op).schema
    except ValueRefused:  # an unknown op fails later, in validate_manifest
        return "gemm"


@dataclass(frozen=True)
class CampaignFields:
    """What creating a campaign takes (``create_campaign``): the checkout and the op, the
    manifest fields a caller sets (None: the target adapter's fact or the derived
    default, ``build_manifest``), the held-out pick's options and where to say what was
    left out.  Every command, the demo and the benchmarks build one; an unknown name is
    refused where it is built (``from_mapping``), never carried into the manifest."""

    source: str
    target_op: str
    target: str | None = None
    granularity: str | None = None
    target_backend: str | None = None
    target_lang: str | None = None  # upstream's manifest may name it; else the backend's
    target_gpu: str | None = None
    execution_mode: str | None = None
    campaign_name: str | None = None
    project_skill: str | None = None
    performance_target: str | None = None
    primary_metric: str | None = None
    target_shapes: str | list[str] | None = None  # "all" or labels
    representative_shapes: list[str] | None = None
    kernel_source: str | list[str] | None = None
    test_command: str | None = None
    benchmark_command: str | None = None
    quick_command: str | None = None
    suite_command: str | None = None
    git_commit: bool | None = None
    git_branch: str | None = None
    max_iterations: int | None = None
    created: str | None = None
    base_commit: str | None = None
    shape_set: str | None = None
    csv_schema: str | None = None
    pinned_header: str | None = None
    cache_mode: str | None = None
    timing: Mapping[str, float] | None = None
    sigma_g: float | None = None
    shape_seconds: Mapping[str, float] | None = None
    pairs: int | None = None
    executor: str | None = None
    image: str | None = None
    image_id: str | None = None
    facts_gpu: str | None = None
    # the held-out pick (``reserve_heldout_shapes``): off, its seed, or the shapes given
    heldout: bool = True
    heldout_seed: int | None = None
    heldout_shapes: list[str] | None = None
    say: Callable[[str], None] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], origin: str) -> CampaignFields:
        """The fields of ``data`` (a command's options, an upstream manifest merged in);
        ConfigError naming ``origin`` and any name that is not a field."""
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ConfigError(
                f"{origin}: unknown campaign field(s) {', '.join(unknown)}; a campaign is "
                f"created from {', '.join(names)}"
            )
        missing = [k for k in ("source", "target_op") if not data.get(k)]
        if missing:
            raise ConfigError(f"{origin}: no {' and no '.join(missing)} for the campaign")
        return cls(**data)

    def as_dict(self) -> dict[str, Any]:
        """The fields set (None left out), ``heldout`` always: what the steps of
        ``create_campaign`` fill in and pass on to ``build_manifest``."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        return {k: v for k, v in out.items() if v is not None or k == "heldout"}


def build_manifest(**fields: Any) -> Manifest:
    """A validated manifest from manifest fields; derives what follows from others:
    target_lang (backend), primary_metric (op), csv_schema (metric), shape_set (gpu),
    created (now) and campaign_name (op, granularity, backend, gpu, today)."""
    data = {k: v for k, v in fields.items() if v is not None}
    op = str(data.get("target_op", ""))
    backend = str(data.get("target_backend", "TRITON")).upper()
    gpu = str(data.get("target_gpu", "cpu"))
    data.update(target_backend=backend, target_gpu=gpu)
    data.setdefault("schema_version", MANIFEST_SCHEMA_VERSION)
    data.setdefault("target_lang", lang_for_backend(backend))
    data.setdefault("primary_metric", default_metric(op))
    data.setdefault("csv_schema", _default_schema(op, str(data["primary_metric"])))
    data.setdefault("shape_set", default_shape_set(op, gpu))
    data.setdefault("created", now_minute())
    if "campaign_name" not in data and op:
        day = dt.datetime.strptime(str(data["created"])[:10], "%Y-%m-%d").date()
        data["campaign_name"] = campaign_name(op, backend, gpu, day, data.get("granularity"))
    return validate_manifest(data, "campaign init")


def git_toplevel(source: Path) -> Path:
    """The top of the git work tree holding ``source``; ConfigError when none."""
    proc = run(["git", "-C", str(source), "rev-parse", "--show-toplevel"], check=False)
    if proc.returncode != 0:
        raise ConfigError(
            f"--source {source} is not a git work tree; point it at a clone of the target "
            "repository (git clone ...) or run `git init` there"
        )
    return Path(proc.stdout.strip()).resolve()


def create_campaign(campaigns_root: Path, given: CampaignFields) -> Campaign:
    """Fill target facts into ``given`` (anything given wins), validate, create."""
    fields = given.as_dict()
    target = get_target(fields.get("target") or "example")
    try:  # upstream's spelling: gemm_fp8_blockwise is gemm_fp8 at blockwise
        op, gran = split_target_op(fields["target_op"], fields.get("granularity"))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    fields.update(target_op=op, granularity=gran)
    fields["project_skill"] = fields.get("project_skill") or PROJECT_SKILLS.get(target.name)
    info = op_info(op)
    info.check_granularity(gran)
    gpu = str(fields.get("target_gpu") or "cpu")
    backend = str(fields.get("target_backend") or target.default_backend(op, gran, gpu)).upper()
    target.check_request(op, gran, backend)
    target.check_device(backend, gpu)
    target.check_build_facts(backend, gpu)
    if fields.get("execution_mode") == "workspace":
        target = target.for_workspace(op, gran, backend)  # Primus-Turbo: HIP/CK refused
    check_campaigns_root(Path(campaigns_root).resolve())
    source = git_toplevel(Path(fields["source"]).resolve())
    check_clean(source)
    upstream = source
    fields.update(source=str(source), target=target.name, target_backend=backend)
    _default_commands(target, source, fields, (op, gran, backend))
    choose_executor(target, fields)
    fields["base_commit"] = fields.get("base_commit") or head_commit(source)
    wanted = fields.get("target_shapes")
    fields["target_shapes"] = pin_shapes(wanted, fields)
    say = fields.pop("say", None) or (lambda _msg: None)
    unfit = fit_device(fields, explicit=wanted not in (None, "all"), say=say)
    sealed = reserve_heldout_shapes(
        fields, explicit=wanted not in (None, "all"), unfit=unfit, say=say
    )
    manifest = build_manifest(**fields)
    if manifest.execution_mode == "workspace":
        from runner.flow.workspace_mode import create_workspace, workspace_dir

        if (Path(campaigns_root).resolve() / manifest.campaign_name).exists():
            raise ConfigError(f"campaign {manifest.campaign_name} already exists")
        fields["campaign_name"] = manifest.campaign_name
        dest = workspace_dir(campaigns_root, manifest.campaign_name)
        manifest = build_manifest(**create_workspace(target, source, dest, fields))
        source = dest
    campaign = Campaign.init(campaigns_root, manifest)
    if sealed is not None:
        write_sealed(campaign.root, sealed)
    # upstream's quick script, if any, adapted to the campaign's op and granularity
    copy_template(upstream, campaign.root, backend, manifest.target_op, manifest.granularity)
    Lineage(source, manifest.campaign_name, None).resolve(manifest.base_commit or "HEAD")
    return campaign


def _default_commands(
    target: Target, source: Path, fields: dict[str, Any], request: tuple[str, str | None, str]
) -> None:
    """The kernel source, focused test and benchmark commands the caller left out: the
    target adapter's, once every file they name is found in ``source``."""
    op, gran, backend = request
    named = target.upstream_files(op, gran, backend)
    defaulted = [
        k for k in ("test_command", "benchmark_command", "kernel_source") if not fields.get(k)
    ]
    check_upstream_files(source, [f for k in defaulted for f in named.get(k, [])], target.name)
    if not fields.get("kernel_source"):
        fields["kernel_source"] = target.kernel_source(op, backend, gran)
    fields["test_command"] = fields.get("test_command") or target.test_command(op, gran, backend)
    fields["benchmark_command"] = fields.get("benchmark_command") or target.benchmark_command(
        op, gran, backend
    )


MAX_LISTED = 10  # changed files a refusal names before "and N more"


def check_clean(source: Path) -> None:
    """Refuse a checkout with uncommitted changes to tracked files: the baseline
    measures the base commit, so an edit left in the tree would silently become part of
    the first round's candidate.  The ConfigError names the files and the way out."""
    proc = run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=source)
    changed = [line[3:] for line in proc.stdout.splitlines() if line.strip()]
    if not changed:
        return
    listed = ", ".join(changed[:MAX_LISTED])
    if len(changed) > MAX_LISTED:
        listed += f" and {len(changed) - MAX_LISTED} more"
    raise ConfigError(
        f"--source {source} has uncommitted changes to tracked files ({listed}): the "
        "baseline measures the last commit, and these edits would silently become part "
        f"of the first round's candidate. Commit them (git -C {source} commit -am "
        f"'...') so the baseline measures them, or stash them (git -C {source} stash), "
        "then run `campaign init` again"
    )


def check_upstream_files(source: Path, files: list[str], target: str) -> None:
    """Every file the target's commands name must exist in the checkout ``source``
    (a ``/``-terminated name: a folder); ConfigError naming each path looked at."""
    missing = [f for f in files if not (source / f).exists()]
    if missing:
        listed = "\n".join(f"  {source / f}" for f in missing)
        raise ConfigError(
            f"--source {source} is not a {target} checkout these commands fit: not found\n"
            f"{listed}\ncheck out a matching revision, or pass --test-command, "
            "--benchmark-command and --kernel-source yourself"
        )


def fit_device(fields: dict[str, Any], *, explicit: bool, say: Callable[[str], None]) -> set[str]:
    """The shapes of the set a pair of workers cannot hold on the campaign's device
    (``runner.judge.memory_fit``; none on the CPU).  Target shapes named on the command
    line that do not fit are refused (exit 2, with the figures); of the whole set
    (``all``) they are left out of the targets, and said."""
    gpu = str(fields.get("target_gpu") or "cpu")
    unfit = unfit_shapes(str(fields["target_op"]), shape_set(fields["shape_set"]), gpu)
    targets = set(fields["target_shapes"])
    mine = [u for u in unfit if u.label in targets]
    if mine and explicit:
        refuse_unfit(
            str(fields["target_op"]),
            [s for s in shape_set(fields["shape_set"]) if s.label in targets],
            gpu,
            "campaign init",
        )
    for u in mine:
        say(f"left out of the target shapes: {u.describe()}")
    fields["target_shapes"] = [
        t for t in fields["target_shapes"] if t not in {u.label for u in mine}
    ]
    return {u.label for u in unfit}


def reserve_heldout_shapes(
    fields: dict[str, Any],
    *,
    explicit: bool,
    unfit: set[str] | None = None,
    say: Callable[[str], None] | None = None,
) -> Sealed | None:
    """By default a few shapes of the op's set are held out (``heldout=False`` or
    ``--no-heldout`` turns it off; ``heldout_shapes`` given wins): chosen with a seed
    (random unless given) and taken out of the targets, so that rounds never measure
    them and ``campaign accept`` judges the final best on them.  Only shapes that fit
    the device are candidates (``unfit``: those that do not; the count of them left out
    is said).  The pick is sealed (``runner.store.sealed``): returned to be written
    into the campaign's sealed folder, and the manifest's fields keep only its count and
    digest, never a label or the seed."""
    enabled = fields.pop("heldout", True)
    seed = fields.pop("heldout_seed", None)
    given = list(fields.pop("heldout_shapes", None) or [])
    if given:
        shapes_by_label(fields["shape_set"], given, "heldout_shapes")  # each in the set
        return _sealed_fields(fields, Sealed.new(given, None))
    if not enabled:
        return None
    seed = int(seed) if seed is not None else secrets.randbelow(2**31)
    targets = list(fields["target_shapes"])
    candidates = [s for s in shape_set(fields["shape_set"]) if s.label not in (unfit or set())]
    if unfit and say is not None:
        say(
            f"held-out pick: {len(unfit)} shape(s) of {fields['shape_set']} left out, they "
            f"do not fit the device: {', '.join(sorted(unfit))}"
        )
    chosen = reserve_heldout(candidates, seed, targets if explicit else ())
    if not chosen:
        return None
    fields["target_shapes"] = [t for t in targets if t not in chosen]
    return _sealed_fields(fields, Sealed.new(chosen, seed))


def _sealed_fields(fields: dict[str, Any], sealed: Sealed) -> Sealed:
    fields["heldout_digest"] = sealed.digest()
    fields["heldout_count"] = len(sealed.labels)
    return sealed


def choose_executor(target: Target, fields: dict[str, Any]) -> None:
    """A target with native code runs in its image by default (docker, the image
    ``campaign image`` builds for the campaign's GPU); others locally.  A docker
    campaign records its image by id, so later rounds run exactly that image."""
    executor = fields.get("executor") or ("docker" if target.editable_install else "local")
    fields["executor"] = executor
    if executor != "docker":
        return
    gpu = str(fields.get("target_gpu") or "cpu")
    image = fields.get("image")
    if not image:
        if not (target.editable_install and gpu.startswith("gfx")):
            raise ConfigError(
                f"the docker executor needs an image for {gpu}: pass --image TAG, or "
                "--executor local"
            )
        from runner.executors.images import ImageRequest, default_tag

        image = default_tag(ImageRequest(gpu_archs=gpu))
    fields["image"] = image
    if not fields.get("image_id"):
        fields["image_id"] = _image_id(str(image), gpu)


def _image_id(image: str, gpu: str) -> str:
    from runner.core.errors import CampaignError
    from runner.store.fingerprint import image_digest

    try:
        return image_digest(image)
    except CampaignError as exc:
        build = (
            f"make image GPU_ARCHS={gpu} TURBO_SRC=<your Primus-Turbo checkout>"
            if gpu.startswith("gfx")
            else "make image-cpu"
        )
        raise ConfigError(
            f"the image {image} is not available here ({str(exc).splitlines()[0]}); build "
            f"it first ({build}), name another with --image, or pass --executor local on "
            "a host that has ROCm and the target installed"
        ) from exc


def pin_shapes(wanted: Any, fields: dict[str, Any]) -> list[str]:
    """``all`` becomes the explicit label list of the shape set now, so the campaign's
    shapes cannot change under it when the runner's default sets change later (labels
    carry the dimensions)."""
    gpu = str(fields.get("target_gpu") or "cpu")
    name = fields.get("shape_set") or default_shape_set(str(fields.get("target_op") or ""), gpu)
    fields["shape_set"] = name
    if wanted in (None, "all"):
        return [s.label for s in shape_set(name)]
    labels = expand_selectors(name, list(wanted))
    return [s.label for s in shapes_by_label(name, labels, known=True)]


def head_commit(source: Path) -> str:
    proc = run(["git", "rev-parse", "--verify", "HEAD^{commit}"], cwd=source, check=False)
    if proc.returncode != 0:
        raise ConfigError(f"{source} has no commit yet: commit the target code first")
    return proc.stdout.strip()


def fresh_example_copy(dest: Path) -> Path:
    """A fresh git repository holding a copy of the bundled example package."""
    if dest.exists():
        raise ConfigError(f"{dest} already exists; choose another folder")
    if not (EXAMPLES_DIR / "turbo_kernels").is_dir():
        raise ConfigError(
            f"the example kernel package is not at {EXAMPLES_DIR}: this installation was "
            "built without it; reinstall turbo-campaign from a wheel or run from a source "
            "checkout"
        )
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", ".pytest_cache", "build")
    shutil.copytree(EXAMPLES_DIR, dest, ignore=ignore)
    run(["git", "init", "-q", "-b", "main"], cwd=dest)
    run(["git", "add", "-A"], cwd=dest)
    run(["git", *GIT_TOOL_COMMIT, "commit", "-q", "-m", "example kernels: base"], cwd=dest)
    return dest
