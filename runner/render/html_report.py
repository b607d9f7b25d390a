"""``campaign report``: the report (termination check and final report, markdown) and the
HTML report, one self-contained page (inline CSS, embedded pictures): the plots, the
scores against the baseline, the shapes x rounds table, every round's section
(``runner.render.report_rounds``), the environment, and the termination check and final
report rendered from their markdown (``runner.render.mdhtml``), their links pointed at
the page's own sections.  It reads the campaign and returns the page and the PNGs;
``runner.flow.report`` writes them into ``report/``."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.core.outcomes import RoundResult, Score
from runner.render.figures import scale_for, score_scale, short_text
from runner.render.final_report import (
    _delta,
    compared_scores,
    peak_info,
    render_final_report,
    termination_text,
)
from runner.render.headline import headline_gain
from runner.render.mdhtml import LinkMap, to_html
from runner.render.report_rounds import (
    environment,
    h,
    round_id,
    round_sections,
    shapes_by_rounds,
    table,
)
from runner.store.acceptance import AcceptanceDict
from runner.store.campaign import Campaign

# ---- the HTML report -----------------------------------------------------------------------
_CSS = """
body{font-family:DejaVu Sans,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;border-bottom:1px solid #ccc;padding-bottom:4px}
h3{font-size:15px}table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ccc;
padding:3px 8px;font-size:13px;text-align:left;vertical-align:top}th{background:#f0f0f0}
img{max-width:100%;margin:8px 0;border:1px solid #ddd}.ACCEPTED{color:#2ca02c}
.ROLLED_BACK h3{color:#d62728}.ACCEPTED h3{color:#2ca02c}.FAILED h3{color:#777}
section.round{border-left:3px solid #ddd;padding-left:12px;margin:18px 0}
pre{background:#f7f7f7;padding:8px;font-size:12px;white-space:pre-wrap}
code{font-size:12px}details{margin:6px 0}nav a{margin-right:12px}
"""


def _img(png: bytes, alt: str) -> str:
    data = base64.b64encode(png).decode("ascii")
    return f'<img alt="{h(alt)}" src="data:image/png;base64,{data}">'


ROUND_HEADERS = ("Round", "Status", "Level", "Hypothesis", "Geomean", "Gate", "Closed")


def _round_rows(results: Sequence[RoundResult]) -> str:
    metric = results[0].score.metric if results else ""
    scale = scale_for(metric, [r.score.aggregate for r in results])
    rows = "".join(
        f'<tr><td><a href="#{round_id(r.round)}">round-{r.round}</a></td>'
        f"<td>{h(r.status.value)}</td><td>{h(r.level)}</td>"
        f'<td title="{h(r.hypothesis.strip())}">{h(short_text(r.hypothesis or r.description))}'
        f"</td><td>{h(scale.value(r.score.aggregate))}</td>"
        f"<td>{h(_delta(r) if r.gate else '—')}</td><td>{h(r.finished)}</td></tr>"
        for r in results
    )
    head = "".join(f"<th>{x}</th>" for x in ROUND_HEADERS)
    return f'<table id="rounds"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'


@dataclass(frozen=True)
class Picture:
    """One picture of the report: its file name under ``report/``, the PNG, its heading
    and caption."""

    name: str
    png: bytes
    heading: str
    caption: str


def report_pictures(
    campaign: Campaign, results: Sequence[RoundResult], pair: tuple[Score, Score, str]
) -> list[Picture]:
    """The report's pictures; the fraction of peak only with a peak."""
    from runner.render import plots

    m = campaign.manifest
    labels = m.representative_shapes or [s.label for s in results[0].score.shapes]
    baseline, final, source = pair
    shown = score_scale(baseline.metric, baseline, final).label(baseline.metric)
    title = f"Per-shape {shown}: baseline vs final best"
    rounds_note = (
        f"σ_G = {(m.sigma_g or 0):.3%}; each round's bar to clear is its incumbent x "
        "(1 + threshold), docs/protocol.md §5.3"
    )
    trend_note = "each shape against the baseline, chained from the paired per-shape changes"
    noise_note = "the spread of each round's interleaved pairs against its threshold"
    pictures = [
        Picture("rounds.png", plots.plot_rounds(results, labels), "Rounds", rounds_note),
        Picture("shape_trend.png", plots.plot_shape_trend(results), "Per-shape trend", trend_note),
        Picture("noise.png", plots.plot_noise(results), "Noise per round", noise_note),
        Picture("shapes.png", plots.plot_shapes(baseline, final, title), "Shapes", source),
    ]
    peak, dtype = peak_info(m)
    if peak:
        roofline = plots.plot_roofline(final, peak, m.target_gpu, dtype)
        pictures.append(
            Picture("roofline.png", roofline, "Fraction of GPU peak", f"peak {peak:g} ({dtype})")
        )
    return pictures


def report_link(report_dir: Path) -> LinkMap:
    """Where a link of the markdown goes in the page: a round summary to its round's
    section, the page itself to its top, a file beside the campaign when it exists;
    anything else stays text (no dead links)."""

    def link(target: str) -> str | None:
        path = target.split("#", 1)[0]
        name = Path(path).parent.name
        if path.endswith("/summary.md") and name.startswith("round-"):
            return f"#{name}"
        if path.endswith("report/index.html"):
            return "#top"
        if target.startswith(("http://", "https://", "#")):
            return target
        return target if (report_dir / path).exists() else None

    return link


def render_html(
    campaign: Campaign,
    results: Sequence[RoundResult],
    acceptance: AcceptanceDict | None,
    when: str,
    pictures: Sequence[Picture],
    *,
    user_stop: bool = False,
) -> str:
    m = campaign.manifest
    baseline, final, source = compared_scores(results, acceptance)
    verdict = acceptance["outcome"] if acceptance else "not run (campaign accept)"
    link = report_link(campaign.root / "report")
    termination = to_html(termination_text(campaign, results, acceptance, user_stop), link)
    final_md = to_html(render_final_report(campaign, results, acceptance, when), link)
    figures = "".join(
        f"<h3>{h(p.heading)}</h3><p>{h(p.caption)}</p>{_img(p.png, p.heading)}" for p in pictures
    )
    peak, _ = peak_info(m)
    info = [
        ["Operator", m.target_op],
        ["Backend", m.target_backend],
        ["GPU", m.target_gpu],
        ["Primary metric", m.primary_metric],
        ["σ_G", f"{(m.sigma_g or 0):.3%}"],
        ["Headline gain (docs/protocol.md §7.4)", headline_gain(results).describe()],
        ["Final acceptance", verdict],
        ["Fraction of peak", "shown below" if peak else f"no peak known for {m.target_gpu}"],
        ["Generated", when],
    ]
    nav = "".join(
        f'<a href="#{k}">{v}</a>'
        for k, v in (
            ("pictures", "Pictures"),
            ("shapes", "Shapes x rounds"),
            ("rounds-list", "Rounds"),
            ("environment", "Environment"),
            ("final-report", "Final report"),
        )
    )
    rounds_dir = campaign.rounds_dir
    return (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{h(campaign.name)}</title>"
        f'<style>{_CSS}</style></head><body><h1 id="top">Campaign report — {h(campaign.name)}'
        f"</h1><nav>{nav}</nav>{table(['Field', 'Value'], info)}"
        f'<h2 id="pictures">Pictures</h2>{figures}'
        f'<h2 id="vs">Baseline vs final best</h2><p>Source: {h(source)}</p>'
        f"{table(['Shape', 'Baseline', 'Final best'], _score_rows(baseline, final))}"
        f'<h2 id="shapes">Shapes x rounds</h2><p>Each round\'s measured value; after the '
        "baseline, in brackets, its paired change against the incumbent of the time (mean "
        f"± 95% interval over its pairs).</p>{shapes_by_rounds(results)}"
        f'<h2 id="rounds-list">Rounds</h2>{_round_rows(results)}'
        f"{round_sections(results, rounds_dir, link)}"
        f'<h2 id="environment">Environment</h2>{environment(results, rounds_dir)}'
        f'<section id="termination">{termination}</section>'
        f'<section id="final-report">{final_md}</section></body></html>\n'
    )


def _score_rows(baseline: Score, final: Score) -> list[list[object]]:
    fin = final.by_label()
    scale = score_scale(baseline.metric, baseline, final)
    return [
        [s.label, scale.value(s.value), scale.value(fin[s.label].value if s.label in fin else None)]
        for s in baseline.shapes
    ]
