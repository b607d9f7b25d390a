"""``campaign report``: the report block appended to optimize.md, and the HTML report,
one self-contained page (inline CSS, embedded pictures) with the rounds, the scores
against the baseline and the plots."""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runner.core.errors import ConfigError
from runner.core.outcomes import RoundResult, Score, Status
from runner.core.timestamps import now_minute
from runner.flow.acceptance_record import load_acceptance
from runner.render.figures import scale_for, score_scale
from runner.render.final_report import (
    _delta,
    compared_scores,
    peak_info,
    render_final_report,
    render_report,
    termination_text,
)
from runner.render.markdown import optimize_title
from runner.store.appendlog import append
from runner.store.campaign import Campaign
from runner.store.guard import preflight

# ---- the HTML report -----------------------------------------------------------------------
_CSS = """
body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;padding:3px 8px;
font-size:13px;text-align:left}th{background:#f0f0f0}img{max-width:100%;margin:8px 0;
border:1px solid #ddd}.ACCEPTED{color:#2ca02c}.ROLLED{color:#d62728}.FAILED{color:#777}
pre{background:#f7f7f7;padding:8px;font-size:12px;white-space:pre-wrap}
"""


def _h(text: object) -> str:
    return html.escape(str(text))


def _html_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    head = "".join(f"<th>{_h(x)}</th>" for x in headers)
    body = "".join("<tr>" + "".join(f"<td>{_h(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _img(path: Path, alt: str) -> str:
    data = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{_h(alt)}" src="data:image/png;base64,{data}">'


ROUND_HEADERS = ("Round", "Status", "Level", "Description", "Geomean", "Gate", "Closed")


def _round_rows(results: Sequence[RoundResult]) -> list[list[object]]:
    metric = results[0].score.metric if results else ""
    scale = scale_for(metric, [r.score.aggregate for r in results])
    return [
        [
            f"round-{r.round}",
            r.status.value,
            r.level,
            r.description,
            scale.value(r.score.aggregate),
            _delta(r) if r.gate else "—",
            r.finished,
        ]
        for r in results
    ]


def _pictures(
    campaign: Campaign, results: Sequence[RoundResult], pair: tuple[Score, Score, str], out: Path
) -> list[tuple[Path, str, str]]:
    """(png, heading, caption) for each picture."""
    from runner.render import plots

    m = campaign.manifest
    labels = m.representative_shapes or [s.label for s in results[0].score.shapes]
    baseline, final, source = pair
    peak, dtype = peak_info(m)
    title = f"Per-shape {baseline.metric}: baseline vs final best"
    band = f"noise band: baseline x (1 ± 3 σ_G), σ_G = {(m.sigma_g or 0):.3%}"
    peak_note = f"peak {peak:g} ({dtype})" if peak else f"no peak known for {m.target_gpu}"
    return [
        (plots.plot_rounds(results, labels, m.sigma_g, out / "rounds.png"), "Rounds", band),
        (plots.plot_shapes(baseline, final, title, out / "shapes.png"), "Shapes", source),
        (
            plots.plot_roofline(final, peak, m.target_gpu, dtype, out / "roofline.png"),
            "Fraction of GPU peak",
            peak_note,
        ),
    ]


def render_html(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    when: str,
    pictures: Sequence[tuple[Path, str, str]],
    *,
    user_stop: bool = False,
) -> str:
    m = campaign.manifest
    baseline, final, source = compared_scores(results, acceptance)
    verdict = acceptance["outcome"] if acceptance else "not run (campaign accept)"
    termination = termination_text(campaign, results, acceptance, user_stop)
    report_md = render_final_report(campaign, results, acceptance, when)
    figures = "".join(
        f"<h3>{_h(head)}</h3><p>{_h(caption)}</p>{_img(p, head)}" for p, head, caption in pictures
    )
    info = [
        ["Operator", m.target_op],
        ["Backend", m.target_backend],
        ["GPU", m.target_gpu],
        ["Primary metric", m.primary_metric],
        ["σ_G", f"{(m.sigma_g or 0):.3%}"],
        ["Final acceptance", verdict],
        ["Generated", when],
    ]
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{_h(campaign.name)}</title>"
        f"<style>{_CSS}</style></head><body><h1>Campaign report — {_h(campaign.name)}</h1>"
        f"{_html_table(['Field', 'Value'], info)}<h2>Pictures</h2>{figures}"
        f"<h2>Baseline vs final best</h2><p>Source: {_h(source)}</p>"
        f"{_html_table(['Shape', 'Baseline', 'Final best'], _score_rows(baseline, final))}"
        f"<h2>Rounds</h2>"
        f"{_html_table(ROUND_HEADERS, _round_rows(results))}"
        f"<h2>Termination check</h2><pre>{_h(termination.strip())}</pre>"
        f"<h2>Final report</h2><pre>{_h(report_md.strip())}</pre></body></html>\n"
    )


def _score_rows(baseline: Score, final: Score) -> list[list[object]]:
    fin = final.by_label()
    scale = score_scale(baseline.metric, baseline, final)
    return [
        [s.label, scale.value(s.value), scale.value(fin[s.label].value if s.label in fin else None)]
        for s in baseline.shapes
    ]


def write_html(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: dict[str, Any] | None,
    when: str,
    *,
    user_stop: bool = False,
) -> tuple[Path, list[Path]]:
    """``report/index.html`` with its PNGs beside it (and embedded)."""
    out = campaign.root / "report"
    pair = compared_scores(results, acceptance)
    pictures = _pictures(campaign, results, pair, out)
    page = render_html(campaign, results, acceptance, when, pictures, user_stop=user_stop)
    (out / "index.html").write_text(page, encoding="utf-8")
    return out / "index.html", [p for p, _, _ in pictures]


@dataclass(frozen=True)
class ReportOutcome:
    optimize_log: Path
    html: Path
    pictures: tuple[Path, ...]


def write_report(
    campaign: Campaign, *, user_stop: bool = False, when: str | None = None
) -> ReportOutcome:
    """Append the report to optimize.md and write ``report/index.html``."""
    stamp = when or now_minute()
    with campaign.lock():
        preflight(campaign)
        results = campaign.results()
        if not any(r.status is Status.BASELINE for r in results):
            raise ConfigError(f"campaign {campaign.name} has no baseline: run `campaign baseline`")
        acceptance = load_acceptance(campaign)
        block = render_report(campaign, results, acceptance, when=stamp, user_stop=user_stop)
        append(campaign.optimize_log, block, expected_prefix=optimize_title(campaign.manifest))
        html, pictures = write_html(campaign, results, acceptance, stamp, user_stop=user_stop)
    return ReportOutcome(campaign.optimize_log, html, tuple(pictures))
