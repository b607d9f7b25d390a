"""The checks of final acceptance that judge what was measured or recorded: the full
validation, held-out shapes, the upstream benchmark's CSV, the full test suite, the
lineage."""

from __future__ import annotations

from collections.abc import Mapping

from runner.core.errors import ConfigError, InfrastructureError
from runner.core.outcomes import GateResult, Score
from runner.flow.acceptance_record import Check
from runner.judge.heldout import heldout_verdict
from runner.render.figures import fmt_gain, scale_for
from runner.store.acceptance import FullBenchmarkInfo, FullSuiteInfo
from runner.store.lineage import Lineage
from runner.store.manifest import Manifest, branch_name
from runner.targets.upstream_csv import BENCH_CSV_NAME

COMMIT_PREFIX = "[optimize] "


def validation_check(gate: GateResult, final: Score) -> Check:
    scale = scale_for(gate.metric, [gate.best_aggregate, gate.candidate_aggregate])
    verdict = (
        f"{scale.label(gate.metric)} geomean {scale.value(gate.best_aggregate)} (base) -> "
        f"{scale.value(gate.candidate_aggregate)} (final) ({fmt_gain(gate.delta_pct, gate)}), "
        f"gate {gate.decision.value}"
    )
    if final.n_fail:
        return Check("full validation", False, f"{final.n_fail} shape(s) FAIL; {verdict}")
    why = "; ".join(r.splitlines()[0] for r in gate.reasons)
    return Check("full validation", gate.decision.accepted, verdict + (f": {why}" if why else ""))


def heldout_check(
    base: Score,
    final: Score,
    heldout: list[str],
    work: Mapping[str, float],
    gate: GateResult | None = None,
) -> Check | None:
    """The over-fitting guard on the held-out shapes as acceptance's check
    (``runner.judge.heldout.heldout_verdict``); None without any held-out shape."""
    verdict = heldout_verdict(base, final, heldout, work, gate)
    return None if verdict is None else Check("held-out shapes", *verdict)


def extract_csv(log: str) -> tuple[str | None, int]:
    """The CSV a benchmark printed (from its first header line naming TFLOPS or GB/s)
    and how many of its rows are FAIL or ERROR; (None, 0) when it printed none."""
    lines = [ln.strip() for ln in log.splitlines() if ln.count(",") >= 3]
    start = next((i for i, ln in enumerate(lines) if "TFLOPS" in ln or "GB/s" in ln), None)
    if start is None:
        return None, 0
    rows = lines[start:]
    fail = sum(1 for ln in rows[1:] if {"FAIL", "ERROR"} & set(ln.split(",")))
    return "\n".join(rows) + "\n", fail


def benchmark_check(info: FullBenchmarkInfo) -> Check:
    if info.get("returncode") != 0:
        return Check("full benchmark", False, f"exit {info.get('returncode')}: see its log")
    if info.get("csv_error"):
        return Check("full benchmark", False, f"its CSV is unusable: {info['csv_error']}")
    if info.get("csv") is None:
        return Check(
            "full benchmark",
            False,
            f"it wrote no {BENCH_CSV_NAME} and printed no CSV; see full_benchmark.log",
        )
    if info.get("fail"):
        return Check("full benchmark", False, f"{info['fail']} row(s) FAIL or ERROR")
    return Check("full benchmark", True, f"ran ({info['command']}); CSV artifacts/{info['csv']}")


def suite_check(info: FullSuiteInfo) -> Check:
    hits = info.get("during_timed_work") or []
    if hits:  # the pause failed: full validation's timing shared the device
        return Check(
            "full test suite",
            False,
            f"{len(hits)} of {info.get('tests_logged')} test(s) ran while work was timed "
            f"(first: {hits[0]}): the suite shared the device with full validation's "
            "turns, so their timing is not clean; run `campaign accept` again",
        )
    ok = info["returncode"] == 0
    tail = info["tail"].strip().splitlines()[-1:] or [""]
    state = "passed" if ok else f"FAILED (exit {info['returncode']})"
    return Check("full test suite", ok, f"`{info['command']}` {state}: {tail[0]}")


# ---- 4. the branch ---------------------------------------------------------------------
def lineage_check(
    lineage: Lineage, m: Manifest, accepted: list[str | None]
) -> tuple[Check, list[str]]:
    base = m.base_commit or ""
    try:
        commits = lineage.linear_history(base)
    except (InfrastructureError, ConfigError) as exc:
        return Check("branch", False, f"{exc}; the branch must be linear from {base[:12]}"), []
    problems = []
    for c in commits:
        subject = lineage.git("log", "-1", "--format=%B", c)
        if not subject.startswith(COMMIT_PREFIX):
            problems.append(f"commit {c[:12]} does not start with {COMMIT_PREFIX!r}")
    if commits != [c for c in accepted if c]:
        problems.append(
            f"the branch holds {len(commits)} commit(s) but {len(accepted)} round(s) were "
            "accepted; each accepted round must be exactly one commit"
        )
    branch = branch_name(m)
    if m.git_commit and branch:
        at = lineage.git("rev-parse", "--verify", "-q", f"refs/heads/{branch}", check=False)
        if at != lineage.head():
            problems.append(f"branch {branch} is at {at[:12] or 'nothing'}, not the lineage head")
    detail = "; ".join(problems) or f"linear, {len(commits)} [optimize] commit(s) from {base[:12]}"
    return Check("branch", not problems, detail), commits
