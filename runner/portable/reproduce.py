"""``campaign reproduce``: re-measure a bundled campaign's round on this host.

Order: extract and verify every checksum (nothing is trusted before that) -> find
the base commit in ``--source`` (by hash, else by its recorded tree) -> compare the
environment with the recorded one (recipe and fingerprint; reported, never hidden) ->
a scratch campaign in ``--out`` with the bundle's manifest -> the lineage replayed to
round N in fresh worktrees (``git am`` of the bundle's format-patch series, plus round
N's candidate.patch when N was not accepted; the user's checkout is never touched) ->
baseline and round N measured paired with ``runner.compare.loop.measure_and_judge`` ->
the verdict of ``runner.portable.reproduce_report.judge`` -> ``reproduction.md``.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from runner.compare.loop import measure_and_judge
from runner.compare.shapes import all_shapes, round_probe
from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.csv_schema import BenchCSV
from runner.core.errors import (
    BundleError,
    CommandFailed,
    ConfigError,
    InfrastructureError,
    MeasurementFailed,
)
from runner.core.limits import block_pairs
from runner.core.outcomes import Status
from runner.core.processes import run
from runner.core.shapes import Shape
from runner.executors.factory import make_executor
from runner.flow.new_campaign import git_toplevel
from runner.judge.gate import calibrate_sigma
from runner.measure.passes import pair_samples, per_pass_metric
from runner.portable.bundle import Bundle, host_versions, image_id, open_bundle
from runner.portable.reproduce_report import (
    Chain,
    EnvCheck,
    Measured,
    ReportFacts,
    Verdict,
    chain_for,
    judge,
    render,
    write_report,
)
from runner.round.build import built_roles
from runner.round.context import open_round
from runner.round.tamper_check import proof
from runner.store.campaign import Campaign
from runner.store.fingerprint import collect_fingerprint, compare_fingerprints, load_fingerprint
from runner.store.fingerprint_check import FINGERPRINT_NAME, measurement_extra
from runner.store.lineage import Lineage
from runner.store.manifest import validate_manifest

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ReproduceRequest:
    bundle: Path
    source: Path
    campaigns_root: Path
    round: int | None = None
    executor: str | None = None
    tolerance_pct: float = 3.0
    out: Path | None = None
    allow_env_mismatch: str | None = None
    gpus: tuple[int, ...] = ()  # lease and shard over these GPUs, as a round does


@dataclass(frozen=True)
class Outcome:
    verdict: Verdict
    report: Path
    env: EnvCheck


def reproduce(req: ReproduceRequest, *, progress: Progress = print) -> Outcome:
    """Run the reproduction; the caller turns a negative verdict into exit 3."""
    if req.tolerance_pct < 0:
        raise ConfigError("--tolerance must be a non-negative percentage, e.g. 3")
    out = _out_dir(req)
    try:
        bundle = open_bundle(req.bundle, out / "bundle")
    except BundleError:  # refused: nothing of it stays on disk
        shutil.rmtree(out if req.out is None else out / "bundle", ignore_errors=True)
        raise
    progress(f"bundle verified: {bundle.root.name}, sha256 {bundle.sha256[:16]}")
    n = _pick_round(bundle, req.round)
    source = git_toplevel(req.source.resolve())
    base, base_note = find_base(source, bundle)
    env = check_environment(bundle, n, req)
    campaign = scratch_campaign(bundle, source, base, out, req.executor)
    chain = _chain(bundle, n)
    with replay(campaign, bundle, n, base) as (base_tree, cand_tree, replay_notes):
        measured = measure(
            campaign, req.executor, n, (base_tree, cand_tree), bundle, progress, req.gpus
        )
    sigma = bundle.manifest.sigma_g or measured.sigma_here or 0.0
    verdict = judge(chain, measured, sigma, req.tolerance_pct)
    facts = _facts(bundle, n, req, source, base, base_note, replay_notes, sigma, out)
    text = render(facts, chain, measured, verdict, env)
    return Outcome(verdict, write_report(out, text), env)


def _out_dir(req: ReproduceRequest) -> Path:
    if req.out is None:
        req.campaigns_root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix="reproduce-", dir=req.campaigns_root)).resolve()
    out = req.out.resolve()
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} is not empty; pass a new or empty folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def _pick_round(bundle: Bundle, wanted: int | None) -> int:
    rounds = {r.round: r for r in bundle.rounds()}
    n = wanted if wanted is not None else bundle.default_round()
    if n not in rounds:
        raise ConfigError(f"round {n} is not in the bundle; it holds rounds {sorted(rounds)}")
    if rounds[n].status == Status.FAILED.value:
        raise ConfigError(f"round {n} FAILED to measure: nothing was recorded to reproduce")
    return n


def _chain(bundle: Bundle, n: int) -> Chain:
    rows = [(r.round, r.status, r.ratio_vs_incumbent, r.pairs) for r in bundle.rounds()]
    try:
        return chain_for(rows, n)
    except ValueError as exc:
        raise BundleError(f"bundle.yaml: {exc}; re-export the bundle") from None


# ---------------------------------------------------------------- the base commit


def find_base(source: Path, bundle: Bundle) -> tuple[str, str]:
    """The base commit in ``source``: by hash, else a commit with the recorded tree."""
    base = str(bundle.info["base_commit"])
    probe = run(["git", "cat-file", "-e", f"{base}^{{commit}}"], cwd=source, check=False)
    if probe.returncode == 0:
        return base, "found by hash"
    tree = bundle.info.get("base_tree")
    if tree:
        log = run(["git", "log", "--all", "--format=%H %T"], cwd=source, check=False).stdout
        for line in log.splitlines():
            commit, _, got = line.partition(" ")
            if got == tree:
                return commit, f"recorded {base[:12]} is absent; {commit[:12]} has the same tree"
    raise ConfigError(
        f"the base commit {base} is not in {source}: fetch it "
        f"(git -C {source} fetch <remote> {base}) or clone the campaign's source "
        "repository (git clone ...), then run reproduce again"
    )


# ---------------------------------------------------------------- environment


def check_environment(bundle: Bundle, n: int, req: ReproduceRequest) -> EnvCheck:
    """Recipe (image or versions) and fingerprint differences; never hidden."""
    executor = req.executor or bundle.manifest.executor
    notes = _recipe_notes(bundle, executor)
    env = EnvCheck(recipe_notes=notes, override=req.allow_env_mismatch)
    recorded = _recorded_fingerprint(bundle, n)
    if recorded is None:
        return env
    label, fp = recorded
    digest = _image_id(bundle.manifest.image) if executor == "docker" else None
    env.recorded_from = label
    extra = measurement_extra(bundle.campaign, None)
    here = collect_fingerprint(image_digest=digest, extra=extra)
    env.diffs = compare_fingerprints(fp, here)
    return env


def _recorded_fingerprint(bundle: Bundle, n: int) -> tuple[str, dict[str, object]] | None:
    for k in (n, 1):
        path = bundle.campaign.artifacts_dir(k) / FINGERPRINT_NAME
        if path.is_file():
            return f"round-{k}", load_fingerprint(path)
    return None


def _recipe_notes(bundle: Bundle, executor: str) -> list[str]:
    recipe = bundle.recipe
    if executor == "docker":
        return [_docker_note(bundle, recipe)]
    here = host_versions()
    return [
        f"{key} {recipe.get(key)} recorded, {value} here"
        for key, value in here.items()
        if recipe.get(key) != value
    ]


def _docker_note(bundle: Bundle, recipe: dict[str, object]) -> str:
    image = bundle.manifest.image
    if not image:
        raise ConfigError("the bundle's campaign has no image; reproduce with --executor local")
    got = _image_id(image)
    if got is None:
        build_args = recipe.get("build_args")
        archs = build_args.get("GPU_ARCHS") if isinstance(build_args, dict) else None
        raise ConfigError(
            f"image {image} is not built here; build it from the recorded recipe "
            f"(bundle recipe/Dockerfile.rocm): campaign image --gpu-archs {archs or 'gfx942'} "
            f"--turbo-src <your Primus-Turbo checkout> --tag {image}, then retry"
        )
    want = recipe.get("image_id")
    if want and want != got:
        return f"image {image} is {got} here, the campaign measured {want}"
    return f"image {image} present ({got})"


def _image_id(image: str | None) -> str | None:
    if not image:
        return None
    try:
        return image_id(image)
    except InfrastructureError:  # no docker here: nothing to compare against
        return None


# ---------------------------------------------------------------- campaign and replay


def scratch_campaign(
    bundle: Bundle, source: Path, base: str, out: Path, executor: str | None
) -> Campaign:
    """A new campaign in ``out`` with the bundle's manifest fields on this source."""
    data = bundle.manifest.model_dump()
    data.update(source=str(source), base_commit=base, quick_command="")
    if executor:
        data["executor"] = executor
    return Campaign.init(out, validate_manifest(data, "bundle manifest.yaml"))


@contextlib.contextmanager
def replay(
    campaign: Campaign, bundle: Bundle, n: int, base: str
) -> Iterator[tuple[Path, Path, list[str]]]:
    """Worktrees of the base commit and of round ``n`` replayed onto it."""
    lineage = Lineage(Path(campaign.manifest.source), campaign.name, None)
    with lineage.worktree(base) as base_tree, lineage.worktree(base) as cand_tree:
        notes = _apply_series(lineage, bundle, n, cand_tree)
        yield base_tree, cand_tree, notes


def _apply_series(lineage: Lineage, bundle: Bundle, n: int, tree: Path) -> list[str]:
    by_commit = _patches_by_commit(bundle)
    notes = []
    for info in bundle.rounds():
        if info.round > n or info.status != Status.ACCEPTED.value or not info.commit:
            continue
        patch = by_commit.get(info.commit)
        if patch is None:
            raise BundleError(f"lineage/ has no patch for round-{info.round} ({info.commit[:12]})")
        _git_am(lineage, tree, patch)
        got = lineage.git("rev-parse", "HEAD^{tree}", cwd=tree)
        same = "identical tree" if got == info.tree else f"tree {got[:12]} != {info.tree}"
        notes.append(f"round-{info.round}: applied {patch.name} ({same})")
    own = [r for r in bundle.rounds() if r.round == n and r.status != Status.ACCEPTED.value]
    if own and n != 1:
        patch_path = bundle.campaign.round_dir(n) / CANDIDATE_PATCH
        lineage.git("apply", "--index", "--whitespace=nowarn", str(patch_path), cwd=tree)
        notes.append(f"round-{n} ({own[0].status}): applied its candidate.patch")
    return notes


def _patches_by_commit(bundle: Bundle) -> dict[str, Path]:
    found = {}
    for patch in bundle.lineage_patches():
        first = patch.read_text(encoding="utf-8").split("\n", 1)[0].split()
        if len(first) > 1 and first[0] == "From":
            found[first[1]] = patch
    return found


def _git_am(lineage: Lineage, tree: Path, patch: Path) -> None:
    try:
        lineage.git("am", "-q", "--committer-date-is-author-date", str(patch), cwd=tree)
    except CommandFailed as exc:
        with contextlib.suppress(CommandFailed):
            lineage.git("am", "--abort", cwd=tree)
        raise ConfigError(
            f"{patch.name} does not apply onto the base commit: {exc.output[-500:]}; is "
            "--source the campaign's target repository?"
        ) from None


# ---------------------------------------------------------------- measurement


def measure(
    campaign: Campaign,
    executor_kind: str | None,
    n: int,
    trees: tuple[Path, Path],
    bundle: Bundle,
    progress: Progress,
    gpus: tuple[int, ...] = (),
) -> Measured:
    """Baseline and round ``n`` paired through ``measure_and_judge``: A B B A turns of
    live workers locally, B C C B passes of fresh processes in containers and on Slurm."""
    m = campaign.manifest
    shapes = _round_shapes(campaign, bundle, n)
    work = campaign.root / "reproduction"
    work.mkdir()
    executor = make_executor(m, executor_kind)
    level = bundle.result(n).level
    role_trees = {"incumbent": trees[0], "candidate": trees[1]}
    try:
        with (
            open_round(campaign, executor, progress, n, level, gpus, workdir=work) as rnd,
            built_roles(rnd, role_trees) as built,
            proof(rnd, role_trees) as proven,
        ):
            samples = block_pairs(m.pairs)
            got = measure_and_judge(built.plan, role_trees, shapes, samples, beside=proven)
    except MeasurementFailed as exc:
        raise InfrastructureError(f"reproduction measurement failed: {exc}") from None
    inc, cand = got.csvs["incumbent"], got.csvs["candidate"]
    pairs = pair_samples(inc, cand, got.reference.metric)
    ratios = tuple(_pair_ratio(p.incumbent, p.candidate) for p in pairs)
    return Measured(got.reference, got.candidate, ratios, _sigma(inc, got.reference.metric))


def _round_shapes(campaign: Campaign, bundle: Bundle, n: int) -> list[Shape]:
    labels = [s.label for s in bundle.result(n).score.shapes]
    by_label = {s.label: s for s in all_shapes(campaign.manifest)}
    # a quick round's unannounced shape (docs/protocol.md §5.7) is drawn again, not listed
    probe = round_probe(campaign.manifest, "quick", n)
    if probe is not None:
        by_label[probe.label] = probe
    missing = [lb for lb in labels if lb not in by_label]
    if missing:
        raise ConfigError(
            f"shapes {missing} of round {n} are not in shape set {campaign.manifest.shape_set} "
            "of this turbo-campaign; use the release that exported the bundle"
        )
    return [by_label[lb] for lb in labels]


def _pair_ratio(inc: dict[str, float], cand: dict[str, float]) -> float:
    labels = [lb for lb in inc if lb in cand]
    if not labels:
        return 0.0
    return math.exp(math.fsum(math.log(cand[lb] / inc[lb]) for lb in labels) / len(labels))


def _sigma(csvs: list[BenchCSV], metric: str) -> float | None:
    per_pass = per_pass_metric(csvs, metric)
    try:
        return calibrate_sigma(per_pass)[0] if len(per_pass) >= 2 else None
    except ConfigError:
        return None


def _facts(
    bundle: Bundle,
    n: int,
    req: ReproduceRequest,
    source: Path,
    base: str,
    base_note: str,
    replay_notes: list[str],
    sigma: float,
    out: Path,
) -> ReportFacts:
    result = bundle.result(n)
    return ReportFacts(
        bundle=str(bundle.path),
        bundle_sha256=bundle.sha256,
        campaign=bundle.manifest.campaign_name,
        round=n,
        round_status=result.status.value,
        metric=result.score.metric,
        base_commit=base,
        base_note=base_note,
        source=str(source),
        executor=req.executor or bundle.manifest.executor,
        replay=tuple(replay_notes),
        sigma_g=sigma,
        tolerance_pct=req.tolerance_pct,
        recorded_score=result.score,
        out_dir=str(out),
    )
