"""The rebuild pipeline end to end on the Primus-Turbo-shaped fixture package.

A fresh git copy of ``tests/data/fake_primus_turbo`` (package ``primus_turbo``, a
compiled ``primus_turbo.pytorch._C``), a ``primus-turbo`` campaign on it, a baseline,
then four VALIDATE rounds through the product's own functions
(``runner.flow.new_campaign.create_campaign``, ``runner.flow.baseline.run_baseline``,
``runner.flow.validate.validate_round``):

1. native slow-down (the kernel sweeps its output 6 times instead of 3): the candidate
   compiled, the incumbent (the base commit, built at the baseline) a cache hit,
   ROLLED BACK;
2. native speed-up (1 sweep: a gain far beyond a docker pass's noise, so its first
   pairs decide): the candidate compiled, the incumbent a hit, ACCEPTED;
3. Python-only speed-up (the forward's three checking native calls turned off, half a
   step's native work): the incumbent (round 3's accepted commit) a hit on the build its
   candidate made, the candidate reuses it: nothing compiled, ACCEPTED;
4. the package loads its ``_C`` from a copy outside the tree under test: FAILED.

Prints each round's verdict, what each role's build was (compile, hit or reuse) and
its seconds; ``--json`` writes them.  Exit status 1 when a verdict or a build differs
from the expected one.

CPU through the docker executor and the CPU image (what the ``rebuild`` tests run):

    PYTHONPATH=. python benchmarks/rebuild_pipeline.py --executor docker \\
        --image turbo-campaign/cpu:py311 --root /tmp/rebuild

A GPU host through the local executor, the native code as a CUDA extension (the
fixture's setup.py builds ``csrc/kernels/gemm/gemm_cuda.cu`` with torch's
CUDAExtension when torch sees a GPU and nvcc is found; otherwise it builds the C kernel
and says why in the build log, which this script prints):

    PYTHONPATH=. python benchmarks/rebuild_pipeline.py --executor local --gpu sm90 \\
        --root /tmp/rebuild --json $OUT/rebuild.json
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT)]

from runner.core.artifact_names import BUILDS  # noqa: E402
from runner.executors.factory import make_executor  # noqa: E402
from runner.flow.baseline import run_baseline  # noqa: E402
from runner.flow.new_campaign import CampaignFields, create_campaign  # noqa: E402
from runner.flow.validate import Request, validate_round  # noqa: E402
from runner.store.campaign import Campaign  # noqa: E402

FIXTURE = ROOT / "tests" / "data" / "fake_primus_turbo"
CONFIG_H = "csrc/kernels/gemm/gemm_config.h"
OPS_PY = "primus_turbo/pytorch/ops/gemm_fp8.py"
INIT_PY = "primus_turbo/pytorch/__init__.py"
SHAPES = ["tiny-16x688x512", "tiny-32x688x512", "tiny-32x1376x512"]
# Short timing: the effects are 33-100%, far above the noise of these settings.
QUICK_TIMING = {"repeats": 3, "warmup_s": 0.05, "batch_s": 0.02, "max_repeats": 6, "budget_s": 0.4}
GIT = ["git", "-c", "user.name=turbo-campaign", "-c", "user.email=turbo-campaign@localhost"]

OUTSIDE_INIT = '''"""The PyTorch side; loads the compiled extension as upstream does."""

import importlib.util
import shutil
import tempfile
from pathlib import Path

import primus_turbo.pytorch._C as _built

# The library that ends up used is a copy outside the tree (as a stale install is):
# the package's ``_C`` is rebound to it, while the import system still holds the
# tree's own.
_copy = Path(tempfile.mkdtemp()) / Path(_built.__file__).name
shutil.copy(_built.__file__, _copy)
_spec = importlib.util.spec_from_file_location("primus_turbo.pytorch._C", _copy)
_C = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_C)
'''


@dataclass(frozen=True)
class Step:
    name: str
    hypothesis: str
    path: str
    old: str | None  # None: replace the whole file with ``new``
    new: str
    expected: str
    builds: dict[str, str]  # role -> the build it must get (compile, hit, reuse)


STEPS = (
    Step(
        "native-slowdown",
        "Sweep the output 6 times instead of 3: the native kernel does twice the work.",
        CONFIG_H,
        "#define PT_FIXTURE_SWEEPS 3",
        "#define PT_FIXTURE_SWEEPS 6",
        "ROLLED BACK",
        {"incumbent": "hit", "candidate": "compile"},
    ),
    Step(
        "native-speedup",
        "Sweep the output once instead of 3 times: the native kernel does a third of the work.",
        CONFIG_H,
        "#define PT_FIXTURE_SWEEPS 3",
        "#define PT_FIXTURE_SWEEPS 1",
        "ACCEPTED",
        {"incumbent": "hit", "candidate": "compile"},
    ),
    Step(
        "python-only",
        "Drop the forward's checking native calls: half the native calls of a step.",
        OPS_PY,
        "VERIFY_FORWARD = True",
        "VERIFY_FORWARD = False",
        "ACCEPTED",
        {"incumbent": "hit", "candidate": "reuse"},
    ),
    Step(
        "outside-import",
        "Load the native library from a copy outside the tree (must not be measured).",
        INIT_PY,
        None,
        OUTSIDE_INIT,
        "FAILED",
        {"incumbent": "hit", "candidate": "reuse"},
    ),
)


def fixture_repo(dest: Path) -> Path:
    """A fresh git repository holding a copy of the fixture package."""
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "build", "*.egg-info")
    shutil.copytree(FIXTURE, dest, ignore=ignore)
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=dest, check=True)
    subprocess.run(["git", "add", "-A"], cwd=dest, check=True)
    subprocess.run([*GIT, "commit", "-q", "-m", "fixture: base"], cwd=dest, check=True)
    return dest


def make_patch(repo: Path, step: Step) -> str:
    """The step's change as a git diff against the repository's HEAD (the work tree is
    left clean)."""
    path = repo / step.path
    text = path.read_text(encoding="utf-8")
    if step.old is not None and step.old not in text:
        raise SystemExit(f"{step.path} has no {step.old!r}")
    path.write_text(step.new if step.old is None else text.replace(step.old, step.new))
    try:
        proc = subprocess.run(["git", "diff"], cwd=repo, check=True, capture_output=True, text=True)
    finally:
        subprocess.run(["git", "checkout", "--", step.path], cwd=repo, check=True)
    return proc.stdout


def new_campaign(root: Path, executor: str, image: str | None, gpu: str) -> Campaign:
    source = fixture_repo(root / "fake-primus-turbo")
    return create_campaign(
        root / "campaigns",
        CampaignFields(
            target="primus-turbo",
            source=str(source),
            target_op="gemm_fp8",
            granularity="blockwise",
            target_backend="TRITON",
            target_gpu=gpu,
            shape_set="tiny",
            target_shapes=SHAPES,
            kernel_source=[CONFIG_H, "csrc/kernels/gemm/gemm.c", OPS_PY],
            timing=QUICK_TIMING,
            executor=executor,
            image=image,
            campaign_name=f"rebuild-{executor}-{int(time.time())}",
        ),
    )


def builds_of(campaign: Campaign, n: int) -> list[dict[str, Any]]:
    path = campaign.artifacts_dir(n) / BUILDS
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else []


def native_kind(campaign: Campaign, n: int) -> str:
    """Which native code the build made, from its log (the fixture's setup.py says
    when it fell back to the C kernel)."""
    logs = sorted(campaign.artifacts_dir(n).glob("passes/build-*/build.log"))
    text = "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in logs)
    for line in text.splitlines():
        if line.strip().startswith("fixture: "):
            return line.strip()
    return "unknown (no build log)"


@dataclass
class Outcome:
    round: int
    step: str
    status: str
    expected: str
    delta_pct: float | None
    seconds: float
    builds: list[dict[str, Any]]
    reasons: list[str]

    @property
    def compiled(self) -> int:
        return sum(1 for b in self.builds if b["build"] == "compile")

    @property
    def ok(self) -> bool:
        step = next(s for s in STEPS if s.name == self.step)
        got = {b["role"]: b["build"] for b in self.builds}
        return self.status == self.expected and got == step.builds


def run_pipeline(
    root: Path,
    *,
    executor: str,
    image: str | None,
    gpu: str = "cpu",
    passes: int = 2,
    steps: tuple[Step, ...] = STEPS,
    say: Any = print,
    record: Any = lambda campaign, outcomes: None,
) -> tuple[Campaign, list[Outcome]]:
    """Baseline and one round per step; returns the campaign and the outcomes.  A
    ``root`` that already holds this script's campaign (a run cut off by a time limit)
    goes on from its first round not closed; ``record(outcomes)`` is called after each
    round, so a cut-off run keeps what it finished."""
    campaign = existing_campaign(root)
    if campaign is None:
        campaign = new_campaign(root, executor, image, gpu)
        t0 = time.perf_counter()
        run_baseline(campaign, make_executor(campaign.manifest), passes=passes, progress=say)
        campaign = Campaign.load(campaign.root)
        say(
            f"baseline: {time.perf_counter() - t0:.1f} s; builds "
            f"{[(b['role'], b['build'], b['seconds']) for b in builds_of(campaign, 1)]}; "
            f"native: {native_kind(campaign, 1)}"
        )
    else:
        say(f"going on with {campaign.root} (rounds closed: {sorted(campaign.closed_rounds())})")
    source = Path(campaign.manifest.source)
    outcomes: list[Outcome] = []
    for n, step in enumerate(steps, start=2):
        if n in campaign.closed_rounds():
            continue  # closed by the run this one goes on from (its figures are there)
        patch = make_patch(source, step)
        t0 = time.perf_counter()
        # the tampered-package step changes the package's __init__ (outside
        # kernel_source): declared, so that the worker's provenance check judges it.  The
        # Python-only speed-up is judged on 2 blocks (4 pairs): on one, a loaded 2-core CI
        # machine read it as +32% +- 199% on 2 pairs (a pair's stdev 22%) at 317fe16.  The
        # native one (a third of the work: +79% to +170% a pair at 8ce628c) is decided by
        # its first pairs, each far beyond the threshold
        blocks = 2 if step.name == "python-only" else None
        request = Request(n, step.hypothesis, patch, allow_outside=(INIT_PY,), pairs=blocks)
        result = validate_round(campaign, make_executor(campaign.manifest), request, progress=say)
        campaign = Campaign.load(campaign.root)
        outcome = Outcome(
            n,
            step.name,
            result.status.value,
            step.expected,
            result.gate.delta_pct if result.gate else None,
            round(time.perf_counter() - t0, 1),
            builds_of(campaign, n),
            list(result.reasons),
        )
        outcomes.append(outcome)
        builds = ", ".join(
            f"{b['role']} {b['build']} ({b['seconds']:.1f} s)" for b in outcome.builds
        )
        delta = "n/a" if outcome.delta_pct is None else f"{outcome.delta_pct:+.2f}%"
        mark = "ok" if outcome.ok else f"UNEXPECTED (wanted {step.expected}, {step.builds})"
        say(
            f"round-{n} {step.name}: {outcome.status} {delta} in {outcome.seconds:.1f} s; "
            f"{builds or 'no build record'}; {mark}"
        )
        if outcome.status == "FAILED":
            say(f"  reason: {outcome.reasons[0].splitlines()[0] if outcome.reasons else '?'}")
        record(campaign, outcomes)
    return campaign, outcomes


def existing_campaign(root: Path) -> Campaign | None:
    """The campaign an earlier run of this script left under ``root`` with a closed
    baseline, or None."""
    found = sorted((root / "campaigns").glob("*/manifest.yaml"))
    for manifest in found:
        campaign = Campaign.load(manifest.parent)
        if 1 in campaign.closed_rounds():
            return campaign
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executor", choices=["docker", "local"], default="docker")
    parser.add_argument("--image", default=None, help="docker: the image (CPU image in CI)")
    parser.add_argument("--gpu", default="cpu", help="campaign target_gpu: cpu, sm90, ...")
    parser.add_argument("--root", type=Path, required=True, help="an empty folder to work in")
    parser.add_argument("--passes", type=int, default=2, help="baseline calibration passes")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.executor == "docker" and not args.image:
        parser.error("--executor docker needs --image (e.g. turbo-campaign/cpu:py311)")
    args.root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()

    def record(campaign: Campaign, outcomes: list[Outcome]) -> None:
        if not args.json:
            return
        doc = {
            "executor": args.executor,
            "image": args.image,
            "gpu": args.gpu,
            "native": native_kind(campaign, 1),
            "total_s": round(time.perf_counter() - t0, 1),
            "campaign": str(campaign.root),
            "rounds": [asdict(o) | {"ok": o.ok} for o in outcomes],
        }
        args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")

    campaign, outcomes = run_pipeline(
        args.root,
        executor=args.executor,
        image=args.image,
        gpu=args.gpu,
        passes=args.passes,
        say=lambda m: print(m, flush=True),
        record=record,
    )
    print(f"total {time.perf_counter() - t0:.1f} s; campaign {campaign.root}")
    record(campaign, outcomes)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
