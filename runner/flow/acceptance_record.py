"""The record of ``campaign accept``: its checks and outcome (``acceptance.json``) and how
it is rendered and written; where it lives and how it is read back: ``runner.store.acceptance``."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.files import write_atomic
from runner.core.outcomes import GateResult, Interval, Score
from runner.core.step_times import StepTimes
from runner.render.figures import score_scale
from runner.store.acceptance import (
    ACCEPTANCE_SCHEMA_VERSION,
    AcceptanceDict,
    CheckDict,
    FullBenchmarkInfo,
    FullSuiteInfo,
)


@dataclass
class Check:
    name: str
    ok: bool
    detail: str

    def to_dict(self) -> CheckDict:
        return {"name": self.name, "ok": self.ok, "detail": self.detail}


@dataclass
class Acceptance:
    """The outcome of ``campaign accept`` (``acceptance.json``)."""

    campaign: str
    started: str
    finished: str = ""
    base_commit: str = ""
    head: str = ""
    passes: int = 0
    shapes: list[str] = field(default_factory=list)
    heldout: list[str] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    baseline: Score | None = None
    final: Score | None = None
    gate: GateResult | None = None
    full_benchmark: FullBenchmarkInfo = field(default_factory=FullBenchmarkInfo)
    full_suite: FullSuiteInfo = field(default_factory=FullSuiteInfo)
    commits: list[str] = field(default_factory=list)
    step_seconds: dict[str, float] = field(default_factory=dict)  # wall time per step
    # each finer step's span (runner.core.step_times): what ran beside what
    step_times: StepTimes | None = None

    @property
    def accepted(self) -> bool:
        return bool(self.checks) and all(c.ok for c in self.checks)

    @property
    def reasons(self) -> list[str]:
        return [f"{c.name}: {c.detail}" for c in self.checks if not c.ok]

    def to_dict(self) -> AcceptanceDict:
        out: AcceptanceDict = {
            "schema_version": ACCEPTANCE_SCHEMA_VERSION,
            "campaign": self.campaign,
            "outcome": "ACCEPTED" if self.accepted else "NOT ACCEPTED",
            "reasons": self.reasons,
            "started": self.started,
            "finished": self.finished,
            "base_commit": self.base_commit,
            "head": self.head,
            "passes": self.passes,
            "shapes": list(self.shapes),
            "heldout_shapes": list(self.heldout),
            "checks": [c.to_dict() for c in self.checks],
            "baseline_score": self.baseline.to_dict() if self.baseline else None,
            "final_score": self.final.to_dict() if self.final else None,
            "gate": self.gate.to_dict() if self.gate else None,
            "full_benchmark": self.full_benchmark.copy(),
            "full_suite": self.full_suite.copy(),
            "commits": list(self.commits),
            "step_seconds": dict(self.step_seconds),
        }
        if self.step_times:
            out["step_times"] = self.step_times.to_dict()
        return out


# ---- records ----------------------------------------------------------------------------
def write_acceptance(out: Path, result: Acceptance) -> None:
    text = json.dumps(result.to_dict(), indent=2, allow_nan=False, ensure_ascii=False) + "\n"
    write_atomic(out / "acceptance.json", text)
    write_atomic(out / "acceptance.md", render_acceptance(result))


def shape_rows(result: Acceptance) -> list[list[str]]:
    """Per shape: baseline, final, change, the paired evidence (``paired_change``),
    check, held-out marker."""
    if result.baseline is None or result.final is None:
        return []
    final = result.final.by_label()
    scale = score_scale(result.baseline.metric, result.baseline, result.final)
    evidence = result.gate.evidence.shapes if result.gate and result.gate.evidence else {}
    rows = []
    for s in result.baseline.shapes:
        f = final.get(s.label)
        fv = f.value if f else None
        delta = f"{(fv / s.value - 1) * 100:+.3f}%" if fv and s.value else "—"
        kind = "held-out" if s.label in result.heldout else "target"
        check = f.check if f else "-"
        paired = paired_change(evidence.get(s.label))
        rows.append([s.label, kind, scale.value(s.value), scale.value(fv), delta, paired, check])
    return rows


def paired_change(est: Interval | None) -> str:
    """A shape's paired mean with its 95% half-width and pairs ("+3.52% ± 0.27% (4
    pairs)"), the evidence the held-out rule judges; "—" without it."""
    if est is None:
        return "—"
    half = est.half_width_pct
    width = f"{half:.2f}%" if half is not None else "?"
    return f"{est.mean_pct:+.2f}% \u00b1 {width} ({est.pairs} pairs)"


def render_acceptance(result: Acceptance) -> str:
    from runner.render.markdown import md_table

    verdict = "ACCEPTED" if result.accepted else "NOT ACCEPTED"
    why = "\n".join(f"- {r}" for r in result.reasons) or "- every check passed"
    checks = md_table(
        ["Check", "Result", "Detail"],
        [[c.name, "PASS" if c.ok else "FAIL", c.detail] for c in result.checks],
    )
    table = md_table(
        ["Shape", "Set", "Base commit", "Final best", "Change", "Paired change (95%)", "Check"],
        shape_rows(result),
    )
    metric = result.baseline.metric if result.baseline else "primary metric"
    commits = "\n".join(f"- {c}" for c in result.commits) or "- none"
    bench = result.full_benchmark
    suite = result.full_suite
    steps = (
        md_table(["Step", "Seconds"], [[n, f"{v:.1f}"] for n, v in result.step_seconds.items()])
        if result.step_seconds
        else ""
    )
    return (
        f"# Final acceptance — {result.campaign}\n\n"
        f"Outcome: **{verdict}** ({result.started} → {result.finished})\n\n{why}\n\n"
        f"Base commit `{result.base_commit}`, lineage head `{result.head}`; "
        f"{result.passes} paired block(s) per side.\n\n## Checks\n\n{checks}\n\n"
        f"## Full validation ({metric}, every target and held-out shape)\n\n"
        f"{table or 'not measured'}\n\n"
        f"## Full benchmark (stored apart; never compared with the quick CSV)\n\n"
        f"- Command: `{bench.get('command', '-')}`\n- Engine: {bench.get('engine', '-')}\n"
        f"- CSV: artifacts/{bench.get('csv') or '(none)'}\n\n"
        f"## Full test suite\n\n- Command: `{suite.get('command', '-')}`\n"
        f"- Exit code: {suite.get('returncode', '-')}\n- Log: artifacts/{suite.get('log', '-')}\n"
        + (f"- Ran: {suite['ran']}\n" if suite.get("ran") else "")
        + "\n"
        f"## Optimisation branch\n\n{commits}\n\n"
        f"## Where the time went\n\n{steps or 'not recorded'}\n"
    )
