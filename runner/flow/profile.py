"""``campaign profile``: a round's roles run under the target's profiler, on this machine
(docs/analysis.md §5).

The roles: round N's incumbent (the lineage head) and its candidate (the head with the
round's ``candidate.patch``; an accepted round's own commit against its parent); round 1,
the base alone.  What runs is the campaign's benchmark command in the role's tree, cut to
one shape (the first representative shape, or the one ``--shapes`` names) with a short
timing budget, under:

* ``ncu`` (Nsight Compute) on NVIDIA: ``ncu --csv --page raw --nvtx --nvtx-include
  campaign-timed/ --launch-count K --log-file ...``, parsed per kernel
  (``runner.render.profile_table.parse_ncu_raw``);
* ``rocprofv3`` on ROCm: ``rocprofv3 --kernel-trace --stats -d DIR -o profile
  --output-format csv -- CMD``, its kernel stats and trace parsed per kernel;
* the torch profiler on the CPU (``runner.worker.analyze.torch_profile``).

The worker marks its timed calls with a named range (``runner.core.profile_range``):
Nsight Compute and the torch profiler keep only what ran inside it, so the tables show
the kernels the gate times, not the harness around them (in an unfiltered Nsight Compute
profile of the example's blockwise FP8 GEMM on one H200, 9d73f9a, 2026-12-03, the
correctness check's three float32 reference GEMMs held 61% of the kernel time).
rocprofv3's kernel trace has no such filter: its table is of the whole benchmark
process, and ``profile.md`` says so.

Files under ``profiles/round-N/<role>/``, the tables in ``profiles/round-N/profile.md``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.errors import CommandFailed, ConfigError
from runner.core.files import write_atomic
from runner.core.outcomes import Status
from runner.core.processes import run
from runner.core.profile_range import RANGE_ENV, RANGE_NAME
from runner.flow import rocprof_compute
from runner.render.profile_table import (
    ProfileRow,
    parse_ncu_raw,
    parse_rocprof,
    parse_torch,
    table_markdown,
)
from runner.round.kernel_facts import tree_pythonpath
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, branch_name
from runner.store.workspace import code_root
from runner.targets.registry import get_target

TOOLS = ("auto", "ncu", "rocprofv3", "torch")
COVERS = {
    "ncu": f"Kernels launched inside the timed calls only (NVTX range `{RANGE_NAME}`).",
    "torch": f"Operators run inside the timed calls only (range `{RANGE_NAME}`).",
    "rocprofv3": "Every kernel of the benchmark process: the correctness check's reference "
    "and the input draws are in this table too (rocprofv3's kernel trace has no range filter).",
}
PROFILE_BUDGET_S = 0.05


@dataclass
class ProfileRun:
    tool: str
    command: str
    folder: Path
    tables: dict[str, list[ProfileRow]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)  # roles whose profiled run failed


def pick_tool(m: Manifest, tool: str) -> str:
    if tool != "auto":
        return tool
    if m.target_gpu.startswith("sm"):
        return "ncu"
    return "rocprofv3" if m.target_gpu.startswith("gfx") else "torch"


def bench_argv(m: Manifest, shapes: str | None) -> tuple[dict[str, str], list[str]]:
    """The benchmark command as (leading VAR=value assignments, argv), cut to one shape."""
    words = shlex.split(m.benchmark_command)
    env: dict[str, str] = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words or words[0] not in ("python", "python3"):
        raise ConfigError(
            f"benchmark_command {m.benchmark_command!r} does not start with python: "
            "campaign profile runs python benchmarks only; profile it by hand"
        )
    argv = [sys.executable, *words[1:]]
    if "runner.worker.fullbench" in words:
        argv += ["--shape-set", m.shape_set, "--budget-s", str(PROFILE_BUDGET_S)]
        chosen = shapes or (m.representative_shapes[0] if m.representative_shapes else None)
        if chosen:
            argv += ["--shapes", chosen]
    return env, argv


def wrapped(tool: str, argv: list[str], out: Path, launches: int) -> list[str]:
    if tool == "torch":
        return [
            argv[0],
            "-m",
            "runner.worker.analyze.torch_profile",
            "--out",
            str(out),
            "--",
            *argv[1:],
        ]
    if shutil.which(tool) is None:
        raise ConfigError(
            f"{tool} is not on PATH: install it (Nsight Compute for ncu, ROCm's rocprofiler-sdk "
            "for rocprofv3) or pass --tool torch"
        )
    if tool == "ncu":
        return [
            "ncu",
            "--csv",
            "--page",
            "raw",
            "--nvtx",
            "--nvtx-include",
            f"{RANGE_NAME}/",
            "--launch-count",
            str(launches),
            "--target-processes",
            "all",
            "--log-file",
            str(out / "ncu_raw.csv"),
            *argv,
        ]
    return [
        "rocprofv3",
        "--kernel-trace",
        "--stats",
        "-d",
        str(out),
        "-o",
        "profile",
        "--output-format",
        "csv",
        "--",
        *argv,
    ]


def parse_folder(tool: str, out: Path, stdout: str = "") -> list[ProfileRow]:
    """The per-kernel table of one role's profile files."""
    if tool == "torch":
        path = out / "torch_profile.csv"
        return parse_torch(path.read_text(encoding="utf-8")) if path.is_file() else []
    if tool == "ncu":
        path = out / "ncu_raw.csv"
        text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
        return parse_ncu_raw(text) or parse_ncu_raw(stdout)
    stats = sorted(out.rglob("*kernel_stats.csv"))
    trace = sorted(out.rglob("*kernel_trace.csv"))
    if not stats:
        return []
    trace_text = trace[0].read_text(encoding="utf-8") if trace else ""
    return parse_rocprof(stats[0].read_text(encoding="utf-8"), trace_text)


@contextmanager
def role_trees(campaign: Campaign, n: int) -> Iterator[dict[str, Path]]:
    """Round ``n``'s roles as fresh worktrees (see the module docstring)."""
    m = campaign.manifest
    result = campaign.load_result(n)
    lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
    with ExitStack() as stack:
        if result.status is Status.BASELINE:
            yield {"incumbent": stack.enter_context(lineage.worktree(lineage.head()))}
            return
        if result.commit:
            inc = lineage.git("rev-parse", f"{result.commit}~1").strip()
            cand = stack.enter_context(lineage.worktree(result.commit))
        else:
            inc = lineage.head()
            patch = campaign.round_dir(n) / CANDIDATE_PATCH
            text = patch.read_text(encoding="utf-8")
            cand = stack.enter_context(lineage.worktree(inc, text))
        yield {"incumbent": stack.enter_context(lineage.worktree(inc)), "candidate": cand}


def profile_round(
    campaign: Campaign,
    n: int,
    *,
    tool: str = "auto",
    shapes: str | None = None,
    launches: int = 200,
    timeout: float = 1800,
) -> ProfileRun:
    m = campaign.manifest
    tool = pick_tool(m, tool)
    env_words, argv = bench_argv(m, shapes)
    folder = campaign.profiles_dir / f"round-{n}"
    target = get_target(m.target)
    got = ProfileRun(tool, shlex.join(argv), folder)
    note = rocprof_compute.hbm_note(m.target_gpu, rocprof_compute.version_text())
    got.notes += [note] if note else []
    with role_trees(campaign, n) as trees:
        for role, tree in trees.items():
            out = folder / role
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir(parents=True)
            own = target.job_env(code_root(tree), m.target_op, m.target_backend)
            env = {**os.environ, **own, **env_words}
            env["PYTHONPATH"] = tree_pythonpath(tree)
            env[RANGE_ENV] = RANGE_NAME  # the profilers keep what the gate times
            cmd = wrapped(tool, argv, out, launches)
            try:  # the profiler's own children (ncu's application) go with it
                done = run(
                    cmd, cwd=tree, env=env, timeout=timeout, check=False, die_with_parent=True
                )
            except CommandFailed as exc:  # timed out
                write_atomic(out / "stdout.txt", exc.output)
                got.failed.append(role)
                got.notes.append(
                    f"{role}: timed out after {timeout:g} s (see {out / 'stdout.txt'}; "
                    "give a larger --timeout)"
                )
                continue
            write_atomic(out / "stdout.txt", done.stdout or "")
            if done.returncode != 0:
                got.failed.append(role)
                got.notes.append(f"{role}: exit {done.returncode} (see {out / 'stdout.txt'})")
            got.tables[role] = parse_folder(tool, out, done.stdout or "")
    write_atomic(folder / "profile.md", profile_markdown(n, got))
    return got


def profile_markdown(n: int, got: ProfileRun) -> str:
    lines = [f"# Profile of round {n} ({got.tool})", "", f"Command: `{got.command}`", ""]
    lines.append(COVERS[got.tool] if got.tool in COVERS else COVERS["torch"])
    lines += ["", *(f"- {note}" for note in got.notes)]
    for role, rows in got.tables.items():
        lines += ["", f"## {role}", "", table_markdown(rows)]
    return "\n".join(lines) + "\n"
