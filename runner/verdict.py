"""What can veto or flag a candidate beyond its measured speed: the static audit of
the patch (docs/protocol.md §8), a gain that does not survive fresh tensors, and a
gain that does not hold on the held-out shapes (docs/measurement.md §5)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from runner.audit import AuditReport, audit_patch, check_declared_bucket
from runner.results import GateResult, TransferCheck


def audit_candidate(
    patch: str, touched: list[str], inc_tree: Path, cand_tree: Path, bucket: str
) -> tuple[list[str], TransferCheck, AuditReport]:
    """The static audit (docs/protocol.md §8.2-8.3): vetoes and the transfer-check record."""
    py = [p for p in touched if p.endswith(".py")]
    new = {p: (cand_tree / p).read_text(encoding="utf-8") for p in py if (cand_tree / p).exists()}
    old = {p: (inc_tree / p).read_text(encoding="utf-8") for p in py if (inc_tree / p).exists()}
    report = audit_patch(patch, new, old)
    vetoes = [
        f"over-fitting audit: {f.bucket} {f.path}:{f.line}: {f.message}"
        for f in report.findings
        if f.severity == "reject"
    ]
    vetoes += [f"declared bucket: {p}" for p in check_declared_bucket(report, bucket)]
    cache = report.adds_cache
    transfer = TransferCheck(
        bucket=bucket.upper(),
        cache_key="; ".join(f.message for f in report.findings if f.bucket == "W1") or "none",
        id_audit=report.id_audit(),
        hit_rate_trace="8-step simulation required (a cache was added)"
        if cache
        else "n/a (no cache added)",
        decision="REJECT-as-overfit"
        if report.rejects
        else ("ACCEPT-with-asterisk" if cache else "ACCEPT-as-real"),
    )
    return vetoes, transfer, report


INFLATION_LIMIT_PCT = 1.0


def heldout_flag(gate: GateResult, heldout: list[str]) -> GateResult:
    """At --level full the held-out shapes are measured too: a gain that does not hold
    on them is flagged in the reasons (over-fitting to the shape set)."""
    deltas = [s.delta_pct for s in gate.shapes if s.label in heldout and s.delta_pct is not None]
    if not deltas or not gate.decision.accepted:
        return gate
    mean = sum(deltas) / len(deltas)
    if mean > 0:
        note = f"held-out shapes confirm the gain (mean {mean:+.3f}%)"
    else:
        note = (
            f"FLAG: the gain does not hold on the held-out shapes (mean {mean:+.3f}%): "
            "possible over-fitting to the representative shapes"
        )
    return replace(gate, reasons=(*gate.reasons, note))


def inflation_veto(gate: GateResult, fresh: float | None, sigma_g: float) -> str | None:
    """docs/measurement.md §5.1: a gain in the benchmark idiom (same tensors every call) that
    exceeds the fresh-tensor training-step gain by more than 1% is inflated.

    The fresh step also pays for making fresh tensors, which dilutes a real gain a
    little, and each side carries its noise: so the gap must exceed max(1%, 3 sigma_G)
    and the fresh gain must also fall below three quarters of the idiom gain.  A gain
    that lives on tensor identity (a cache) shows a fresh gain near zero: caught."""
    if fresh is None or not gate.decision.accepted:
        return None
    gap = gate.delta_pct - 100.0 * fresh
    limit = max(INFLATION_LIMIT_PCT, 300.0 * sigma_g)
    if gap > limit and 100.0 * fresh < 0.75 * gate.delta_pct:
        return (
            f"over-fit: benchmark-idiom gain {gate.delta_pct:+.3f}% exceeds the "
            f"fresh-tensor step gain {100.0 * fresh:+.3f}% by {gap:.3f} points (> 1%)"
        )
    return None
