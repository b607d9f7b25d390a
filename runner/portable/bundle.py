"""``campaign export``: a self-contained, checksummed bundle of a campaign, and the
reading side (``open_bundle``) that refuses a tampered one.

The bundle is a ``.tar.gz`` holding one folder named after the campaign, laid out
like the campaign directory itself (so ``runner.store.campaign.Campaign`` reads it) plus::

    bundle.yaml          what the bundle is: campaign, base and head commits, rounds
                         with status and aggregates, sigma_G, when it was made
    MANIFEST.sha256      ``<sha256>  <path>`` for every other file (sha256sum -c format)
    schema/header.csv    the pinned CSV header
    lineage/*.patch      ``git format-patch base..refs/campaigns/<name>/head``
    recipe/recipe.yaml   the executor, image, build args, python/torch/triton versions
    recipe/Dockerfile.rocm
    manifest.yaml, quick_test_bench.py, logs/, rounds/round-N/ (result.json,
    summary.md, candidate.patch, artifacts/ with CSVs, passes, fingerprint.yaml)

Checksums protect against accidents and casual edits, not against an attacker who
regenerates ``MANIFEST.sha256``: share the bundle's own sha256 (printed by export)
through another channel when that matters.
"""

from __future__ import annotations

import io
import platform
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict, cast

import yaml

from runner import __version__
from runner.core.errors import BundleError, CommandFailed, ConfigError
from runner.core.files import sha256_file, write_atomic
from runner.core.outcomes import RoundResult, Status
from runner.core.processes import run
from runner.core.timestamps import now_minute
from runner.core.versions import require_schema_version
from runner.executors.images import DOCKERFILE, REPO_ROOT
from runner.portable.checksums import check_listing, read_listing
from runner.portable.unpack import unpack
from runner.store.campaign import Campaign
from runner.store.fingerprint import dist_version
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, load_manifest

BUNDLE_SCHEMA_VERSION = 1
CHECKSUMS = "MANIFEST.sha256"
BUNDLE_YAML = "bundle.yaml"
SKIP_NAMES = frozenset({".lock", "__pycache__"})


class RoundInfoDict(TypedDict):
    """``RoundInfo.to_dict``."""

    round: int
    status: str
    level: str
    metric: str
    aggregate: float
    ratio_vs_incumbent: float | None
    pairs: int
    commit: str | None
    tree: str | None


class BundleInfo(TypedDict):
    """``bundle.yaml`` (``bundle_info``)."""

    schema_version: int
    campaign: str
    base_commit: str
    base_tree: str | None
    head_commit: str
    primary_metric: str
    sigma_g: float | None
    pairs: int
    rounds: list[RoundInfoDict]
    created: str
    turbo_campaign: str


@dataclass(frozen=True)
class RoundInfo:
    """One round as ``bundle.yaml`` records it."""

    round: int
    status: str
    level: str
    metric: str
    aggregate: float
    ratio_vs_incumbent: float | None  # paired geomean ratio (gate), None for round-1
    pairs: int  # paired samples behind that ratio
    commit: str | None
    tree: str | None

    def to_dict(self) -> RoundInfoDict:
        return {
            "round": self.round,
            "status": self.status,
            "level": self.level,
            "metric": self.metric,
            "aggregate": self.aggregate,
            "ratio_vs_incumbent": self.ratio_vs_incumbent,
            "pairs": self.pairs,
            "commit": self.commit,
            "tree": self.tree,
        }


# ---------------------------------------------------------------- export


def export_bundle(campaign: Campaign, out: Path | None = None) -> Path:
    """Write the bundle of ``campaign`` to ``out`` (default
    ``<campaign>.bundle.tar.gz`` in the current directory) and return its path."""
    target = Path(out or f"{campaign.name}.bundle.tar.gz").resolve()
    # under the campaign's lock: a round that is running (it holds the lock) is never
    # bundled half-written; the command is refused as busy and says to wait
    with campaign.lock(), tempfile.TemporaryDirectory(prefix="turbo-campaign-export-") as tmp:
        if not campaign.closed_rounds():
            raise ConfigError(
                f"campaign {campaign.name} has no closed round: run the baseline first"
            )
        stage = Path(tmp) / campaign.name
        _stage(campaign, stage)
        write_checksums(stage)
        _write_tar(stage, target)
    return target


def _stage(campaign: Campaign, stage: Path) -> None:
    m = campaign.manifest
    ignore = shutil.ignore_patterns(*SKIP_NAMES)
    stage.mkdir(parents=True)
    for name in ("manifest.yaml", "quick_test_bench.py"):
        if (campaign.root / name).is_file():
            shutil.copy2(campaign.root / name, stage / name)
    if campaign.logs_dir.is_dir():
        shutil.copytree(campaign.logs_dir, stage / "logs", ignore=ignore)
    for n in campaign.closed_rounds():  # an unclosed round (killed) records nothing
        rel = campaign.round_dir(n).relative_to(campaign.root)
        shutil.copytree(campaign.round_dir(n), stage / rel, ignore=ignore)
    (stage / "schema").mkdir()
    write_atomic(stage / "schema" / "header.csv", (m.pinned_header or "") + "\n")
    lineage = _lineage(m)
    head = lineage.head()
    _format_patches(lineage, m.base_commit or "", head, stage / "lineage")
    _write_recipe(campaign, stage / "recipe")
    info = bundle_info(campaign, lineage, head)
    write_atomic(stage / BUNDLE_YAML, yaml.safe_dump(info, sort_keys=False))


def _lineage(m: Manifest) -> Lineage:
    source = Path(m.source)
    if not (source / ".git").exists():
        raise ConfigError(
            f"the campaign's source repository {source} is missing; export on the machine "
            "that ran the campaign (the bundle needs its lineage commits)"
        )
    return Lineage(source, m.campaign_name, None)


def _format_patches(lineage: Lineage, base: str, head: str, dest: Path) -> None:
    dest.mkdir(parents=True)
    if head != base:
        lineage.git("format-patch", "-q", "--no-signature", "-o", str(dest), f"{base}..{head}")


def tree_of(lineage: Lineage, commit: str) -> str | None:
    try:
        return lineage.git("rev-parse", f"{commit}^{{tree}}")
    except CommandFailed:
        return None


def bundle_info(campaign: Campaign, lineage: Lineage, head: str) -> BundleInfo:
    m = campaign.manifest
    base = m.base_commit or ""
    rounds = [round_info(campaign, r, lineage).to_dict() for r in campaign.results()]
    return {
        "schema_version": BUNDLE_SCHEMA_VERSION,
        "campaign": m.campaign_name,
        "base_commit": base,
        "base_tree": tree_of(lineage, base),
        "head_commit": head,
        "primary_metric": m.primary_metric,
        "sigma_g": m.sigma_g,
        "pairs": m.pairs,
        "rounds": rounds,
        "created": now_minute(),
        "turbo_campaign": __version__,
    }


def round_info(campaign: Campaign, r: RoundResult, lineage: Lineage) -> RoundInfo:
    gate = r.gate
    ratio = None
    if gate is not None and gate.best_aggregate > 0:
        ratio = gate.candidate_aggregate / gate.best_aggregate
    return RoundInfo(
        round=r.round,
        status=r.status.value,
        level=r.level,
        metric=r.score.metric,
        aggregate=r.score.aggregate,
        ratio_vs_incumbent=ratio,
        pairs=count_pairs(campaign.artifacts_dir(r.round)),
        commit=r.commit,
        tree=tree_of(lineage, r.commit) if r.commit else None,
    )


def count_pairs(artifacts: Path) -> int:
    """Paired samples of a round: its candidate passes (one per incumbent pass)."""
    return len(list((artifacts / "passes").glob("pass-*-candidate/benchmark.csv")))


def _write_recipe(campaign: Campaign, dest: Path) -> None:
    dest.mkdir(parents=True)
    if (REPO_ROOT / DOCKERFILE).is_file():
        shutil.copy2(REPO_ROOT / DOCKERFILE, dest / DOCKERFILE)
    recipe = environment_recipe(campaign)
    write_atomic(dest / "recipe.yaml", yaml.safe_dump(recipe, sort_keys=False))


def environment_recipe(campaign: Campaign) -> dict[str, object]:
    """How to rebuild the environment: the image for docker, versions for local."""
    m = campaign.manifest
    recipe: dict[str, object] = {
        "executor": m.executor,
        "environment": "local" if m.executor == "local" else "image",
        "image": m.image,
        "image_id": image_id(m.image) if m.executor == "docker" and m.image else None,
        "dockerfile": DOCKERFILE if (REPO_ROOT / DOCKERFILE).is_file() else None,
        "build_args": {"GPU_ARCHS": m.target_gpu} if m.target_gpu.startswith("gfx") else {},
        **host_versions(),
    }
    return recipe


def host_versions() -> dict[str, str | None]:
    """The versions a local-executor bundle records and a reproduction compares."""
    return {
        "python": platform.python_version(),
        "torch": dist_version("torch"),
        "triton": dist_version("triton", "pytorch-triton-rocm"),
    }


def image_id(image: str) -> str | None:
    """The local image's id (``docker image inspect``); None when it is not built here."""
    proc = run(["docker", "image", "inspect", "--format", "{{.Id}}", image], check=False)
    return proc.stdout.strip() if proc.returncode == 0 else None


# ---------------------------------------------------------------- checksums


def _files(root: Path) -> list[str]:
    return sorted(
        p.relative_to(root).as_posix()
        for p in root.rglob("*")
        if p.is_file() and p.name != CHECKSUMS
    )


def write_checksums(root: Path) -> None:
    lines = [f"{sha256_file(root / rel)}  {rel}" for rel in _files(root)]
    write_atomic(root / CHECKSUMS, "\n".join(lines) + "\n")


def verify_checksums(root: Path) -> None:
    """Every file listed must match its sha256 and every file must be listed (the
    listing read and held against the files as the archive's members were:
    ``runner.portable.checksums``)."""
    listing = root / CHECKSUMS
    expected = read_listing(listing.read_bytes() if listing.is_file() else None, CHECKSUMS)
    files = {rel: sha256_file(root / rel) for rel in _files(root)}
    check_listing(files, expected, CHECKSUMS)


# ---------------------------------------------------------------- tar


def _write_tar(stage: Path, target: Path) -> None:
    """A reproducible tar.gz: sorted entries, fixed owner and mtime."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.tmp")
    with tarfile.open(tmp, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for path in [stage, *sorted(stage.rglob("*"))]:
            info = tar.gettarinfo(str(path), arcname=path.relative_to(stage.parent).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            if path.is_file():
                with path.open("rb") as fh:
                    tar.addfile(info, io.BytesIO(fh.read()))
            else:
                tar.addfile(info)
    tmp.replace(target)


def extract(bundle: Path, dest: Path) -> Path:
    """Check ``bundle`` member by member against its checksums and the size limits, then
    extract it into ``dest`` (``runner.portable.unpack``); return the campaign folder."""
    return unpack(bundle, dest, CHECKSUMS)


# ---------------------------------------------------------------- reading


@dataclass
class Bundle:
    """An extracted, verified bundle."""

    path: Path
    root: Path
    info: BundleInfo
    campaign: Campaign

    @property
    def manifest(self) -> Manifest:
        return self.campaign.manifest

    @property
    def sha256(self) -> str:
        return sha256_file(self.path)

    @property
    def recipe(self) -> dict[str, object]:
        return _yaml(self.root / "recipe" / "recipe.yaml")

    def rounds(self) -> list[RoundInfo]:
        return [RoundInfo(**r) for r in self.info["rounds"]]

    def result(self, n: int) -> RoundResult:
        return self.campaign.load_result(n)

    def lineage_patches(self) -> list[Path]:
        return sorted((self.root / "lineage").glob("*.patch"))

    def default_round(self) -> int:
        """The last accepted round (the baseline when nothing was accepted)."""
        good = {Status.BASELINE.value, Status.ACCEPTED.value}
        return max(r.round for r in self.rounds() if r.status in good)


def open_bundle(path: Path, dest: Path) -> Bundle:
    """Extract into ``dest``, verify every checksum first, then read the bundle."""
    root = extract(path.resolve(), dest)
    verify_checksums(root)
    info = cast("BundleInfo", _yaml(root / BUNDLE_YAML))  # its schema_version is checked below
    version = info.get("schema_version")
    require_schema_version(
        version,
        BUNDLE_SCHEMA_VERSION,
        f"bundle {path}",
        older="reproduce it with the turbo-campaign release that exported it",
        newer="upgrade turbo-campaign (pip install -U turbo-campaign) to read it",
        error=BundleError,
    )
    manifest = load_manifest(root / "manifest.yaml")
    return Bundle(path.resolve(), root, info, Campaign(root=root, manifest=manifest))


def _yaml(path: Path) -> dict[str, object]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise BundleError(f"cannot read {path.name} from the bundle: {exc}") from None
    if not isinstance(data, dict):
        raise BundleError(f"{path.name} in the bundle is not a mapping: re-export")
    return data
