"""The diagnostic half of the HTML report (``runner.render.html_report``), read from the
round records only: the shapes x rounds table, one section per closed round (rolled
back and failed ones too) with its per-shape data, the paired evidence the gate judged
(mean ± 95% interval, pairs), its diff (``candidate.patch``), its duration (the record's
start and finish, and the measuring span of ``artifacts/turns.jsonl``) and its
summary.md, and the environment fingerprint (``artifacts/fingerprint.yaml``)."""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import yaml

from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.outcomes import RoundResult, Score, Status
from runner.core.stats import stdev
from runner.render.figures import DASH, Scale, fmt_gain, fmt_pct, score_scale
from runner.render.kernel_facts import facts_lines
from runner.render.mdhtml import LinkMap, to_html

TIME_FORMAT = "%Y-%m-%d %H:%M"


def h(text: object) -> str:
    return html.escape(str(text))


def table(headers: Sequence[str], rows: Sequence[Sequence[object]], css: str = "") -> str:
    """An HTML table of escaped cells (``css``: the table's id and class attributes)."""
    head = "".join(f"<th>{h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{h(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table{css}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def round_id(n: int) -> str:
    return f"round-{n}"


def paired_change(r: RoundResult, label: str) -> tuple[float | None, float | None, int]:
    """(the paired change of ``label`` in percent, its 95% half-width, pairs): the gate's
    paired mean when it had pairs, else its per-shape change; (None, None, 0) without."""
    shapes = r.gate.evidence.shapes if r.gate and r.gate.evidence else {}
    if label in shapes:
        e = shapes[label]
        return e.mean_pct, e.half_width_pct, e.pairs
    delta = next((s.delta_pct for s in r.gate.shapes if s.label == label), None) if r.gate else None
    return delta, None, 0


def fmt_change(pct: float | None, half: float | None, pairs: int) -> str:
    if pct is None:
        return DASH
    if half is None:
        return fmt_pct(pct)
    return f"{fmt_pct(pct)} ± {half:.2f}% ({pairs} pairs)"


def _scale(results: Sequence[RoundResult]) -> Scale:
    scores: list[Score | None] = [r.score for r in results]
    return score_scale(results[0].score.metric, *scores)


def shapes_by_rounds(results: Sequence[RoundResult]) -> str:
    """Shapes down, rounds across: each round's measured value of the shape and, after
    the baseline, its paired change against the incumbent of the time."""
    scale = _scale(results)
    labels = [s.label for s in results[0].score.shapes]
    headers = ["Shape", *(f"round-{r.round} {r.status.value}" for r in results)]
    rows = []
    for label in labels:
        row: list[object] = [label]
        for r in results:
            s = r.score.by_label().get(label)
            value = scale.value(s.value) if s and s.check == "PASS" else (s.check if s else DASH)
            if r.status is Status.BASELINE:
                row.append(value)
            else:
                row.append(f"{value} ({fmt_change(*paired_change(r, label))})")
        rows.append(row)
    return table(headers, rows, ' id="shapes-by-rounds"')


def duration(r: RoundResult, round_dir: Path) -> str:
    """'2026-12-01 11:21 → 11:24 (3 min); measuring 42 s (turns.jsonl)'."""
    text = f"{r.started} → {r.finished}"
    try:
        minutes = (
            datetime.strptime(r.finished, TIME_FORMAT) - datetime.strptime(r.started, TIME_FORMAT)
        ).total_seconds() / 60
        text += f" ({minutes:.0f} min)"
    except ValueError:
        pass
    span = _measuring_s(round_dir / "artifacts" / "turns.jsonl")
    if span is not None:
        text += f"; measuring {span:.0f} s (artifacts/turns.jsonl)"
    return text


def _measuring_s(path: Path) -> float | None:
    try:
        turns = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x]
    except (OSError, ValueError):
        return None
    starts = [t["start"] for t in turns if isinstance(t, dict) and "start" in t]
    ends = [t["end"] for t in turns if isinstance(t, dict) and "end" in t]
    return max(ends) - min(starts) if starts and ends else None


def _shape_rows(r: RoundResult, scale: Scale) -> list[list[object]]:
    incumbent = (r.best or r.baseline).by_label() if r.status is not Status.BASELINE else {}
    rows: list[list[object]] = []
    for s in r.score.shapes:
        inc = incumbent.get(s.label)
        row: list[object] = [s.label, s.check, scale.value(s.forward), scale.value(s.backward)]
        if r.status is Status.BASELINE:
            rows.append([*row, scale.value(s.value)])
            continue
        pct, half, pairs = paired_change(r, s.label)
        rows.append(
            [
                *row,
                scale.value(inc.value if inc else None),
                scale.value(s.value),
                fmt_change(pct, half, pairs),
            ]
        )
    return rows


def _evidence(r: RoundResult) -> str:
    g = r.gate
    if g is None:
        return "<p>No gate verdict (the round was not measured to the end).</p>"
    spread = g.evidence.gain.spread_pct if g.evidence else None
    if spread is None and len(g.pair_gains_pct) > 1:  # decided before the paired rules
        spread = stdev(g.pair_gains_pct)
    per_pair = ", ".join(f"{x:+.2f}%" for x in g.pair_gains_pct) or "none recorded"
    facts = [
        ["Decision", g.decision.value],
        ["Paired gain vs incumbent", fmt_gain(g.delta_pct, g)],
        ["Acceptance threshold", DASH if g.threshold_pct is None else f"{g.threshold_pct:.3f}%"],
        ["Noise of this round", DASH if spread is None else f"stdev {spread:.2f}% a pair"],
        ["Per-pair gains", per_pair],
        ["Reasons", "; ".join(g.reasons) or DASH],
    ]
    return table(["Paired evidence", ""], facts, ' class="evidence"')


def _diff(r: RoundResult, round_dir: Path) -> str:
    if r.status is Status.BASELINE:
        return "<p>Diff: none (the base commit).</p>"
    patch = round_dir / CANDIDATE_PATCH
    if not patch.is_file():
        return "<p>Diff: no candidate.patch recorded.</p>"
    text = patch.read_text(encoding="utf-8", errors="replace")
    return (
        f'<details class="diff" open><summary>Diff (candidate.patch, {r.change})</summary>'
        f"<pre><code>{h(text)}</code></pre></details>"
    )


def _kernel_facts(r: RoundResult) -> str:
    """Incumbent -> candidate ISA facts and their warnings (docs/analysis.md)."""
    lines = facts_lines(r.kernel_facts)
    if not lines:
        return ""
    return (
        f'<details class="kernel-facts" open><summary>{h(lines[0])}</summary>'
        f"<pre><code>{h(chr(10).join(lines[1:]))}</code></pre></details>"
    )


def round_section(r: RoundResult, round_dir: Path, scale: Scale, link: LinkMap) -> str:
    heads = [
        "Shape",
        "Check",
        scale.label("Forward " + scale.base),
        scale.label("Backward " + scale.base),
    ]
    heads += (
        [f"{scale.unit} (primary)"]
        if r.status is Status.BASELINE
        else [f"Incumbent ({scale.unit})", f"Candidate ({scale.unit})", "Paired change"]
    )
    summary = round_dir / "summary.md"
    summary_html = (
        to_html(summary.read_text(encoding="utf-8"), link, id_prefix=f"r{r.round}-")
        if summary.is_file()
        else "<p>No summary.md.</p>"
    )
    facts = [
        ["Status", r.status.value],
        ["Level", r.level],
        ["Duration", duration(r, round_dir)],
        ["Change", r.change or DASH],
        ["Commit", r.commit or DASH],
        *([["Tournament", r.tournament.line]] if r.tournament is not None else []),
    ]
    return (
        f'<section class="round {r.status.name}" id="{round_id(r.round)}">'
        f"<h3>round-{r.round} — {h(r.status.value)}</h3>"
        f'<p class="hypothesis">{h(r.hypothesis.strip() or r.description)}</p>'
        f"{table(['Field', 'Value'], facts, ' class=facts')}"
        f"{table(heads, _shape_rows(r, scale), ' class=shapes')}"
        f"{_evidence(r) if r.status is not Status.BASELINE else ''}"
        f"{_diff(r, round_dir)}"
        f"{_kernel_facts(r)}"
        f"<details><summary>summary.md</summary>{summary_html}</details></section>"
    )


def round_sections(results: Sequence[RoundResult], rounds_dir: Path, link: LinkMap) -> str:
    scale = _scale(results)
    return "".join(
        round_section(r, rounds_dir / round_id(r.round), scale, link)
        for r in sorted(results, key=lambda r: r.round)
    )


# ---- the environment ------------------------------------------------------------------
def _flat(data: object, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(data, dict):
        return [kv for k, v in data.items() for kv in _flat(v, f"{prefix}{k}.")]
    if data is None or data == {} or data == []:
        return []
    return [(prefix.rstrip("."), str(data))]


def fingerprint(round_dir: Path) -> dict[str, str]:
    """A round's ``artifacts/fingerprint.yaml`` flattened (empty fields left out)."""
    path = round_dir / "artifacts" / "fingerprint.yaml"
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError):
        return {}
    return {k: v for k, v in _flat(data) if k not in ("schema_version", "collected")}


def environment(results: Sequence[RoundResult], rounds_dir: Path) -> str:
    """The baseline's fingerprint, and per later round what differs from it."""
    base = fingerprint(rounds_dir / round_id(1))
    if not base:
        return "<p>No fingerprint recorded (rounds/round-1/artifacts/fingerprint.yaml).</p>"
    rows = []
    for r in sorted(results, key=lambda r: r.round):
        if r.round == 1:
            continue
        own = fingerprint(rounds_dir / round_id(r.round))
        changed = [f"{k}: {base.get(k, DASH)} → {v}" for k, v in own.items() if base.get(k) != v]
        rows.append([f"round-{r.round}", "; ".join(changed) or "same as the baseline"])
    return (
        f"{table(['Field (baseline)', 'Value'], sorted(base.items()), ' id=environment-table')}"
        f"{table(['Round', 'Environment against the baseline'], rows)}"
    )
