"""The analysis block of ``campaign status`` (docs/analysis.md §4): after 2 rollbacks in
a row it names ``campaign profile`` and shows the last rounds' kernel facts; after 3,
``campaign isa`` too (upstream's escalation: profile, then inspect the ISA; Primus-Turbo
``agent/rules/iteration_rules.mdc`` Rule 7, checked at a6a16cdc).  Kept apart from the
escalation ladder's text (``runner.render.status``), which only calls ``analysis_lines``.
"""

from __future__ import annotations

from collections.abc import Sequence

from runner.core.outcomes import RoundResult, Status
from runner.render.kernel_facts import facts_compact

__all__ = ["analysis_lines"]

PROFILE_AFTER = 2
ISA_AFTER = 3


def _campaign_flag(name: str) -> str:
    return f" --campaign {name}" if name else ""


def analysis_lines(
    results: Sequence[RoundResult], rollbacks: int, name: str = ""
) -> list[tuple[str, str]]:
    """``(key, line)`` pairs for the status: the commands the rollbacks call for and the
    facts (incumbent -> candidate, with warnings) of the rolled-back rounds."""
    if rollbacks < PROFILE_AFTER:
        return []
    rolled = [r for r in sorted(results, key=lambda r: r.round) if r.status is Status.ROLLED_BACK]
    last = rolled[-min(rollbacks, ISA_AFTER) :]
    if not last:
        return []
    n, flag = last[-1].round, _campaign_flag(name)
    out = [
        (
            "analysis",
            f"{rollbacks} rollbacks in a row: profile before the next change: "
            f"campaign profile --round {n}{flag}",
        )
    ]
    if rollbacks >= ISA_AFTER:
        out.append(
            ("analysis isa", f"inspect the ISA of both roles: campaign isa --round {n}{flag}")
        )
    for r in last:
        facts = r.kernel_facts
        if facts is None:
            out.append((f"facts round-{r.round}", "none recorded (a round before kernel facts)"))
            continue
        if facts.note:
            out.append((f"facts round-{r.round}", facts.note))
        for i, line in enumerate(facts_compact(facts)):
            out.append((f"facts round-{r.round} #{i + 1}", line))
        for i, warning in enumerate(facts.warnings):
            out.append((f"facts round-{r.round} warning #{i + 1}", warning))
    return out
