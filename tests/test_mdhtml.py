"""The report's markdown to HTML (``runner.render.mdhtml``) on the constructs the runner
writes, and hypotheses cut at a word boundary (``runner.render.figures.short_text``)."""

from __future__ import annotations

from runner.render.figures import short_text
from runner.render.mdhtml import to_html

SUMMARY = """# Round 2 — ROLLED BACK

## Results

- Level: quick
- Raw artifacts:
  - `rounds/round-2/artifacts/gate.json`
  - `rounds/round-2/artifacts/<b>.csv`
- See [the summary](../rounds/round-2/summary.md) and [gone](missing.md)

| Shape | Δ vs current best |
|-------|-------------------|
| cpu-small | **-14.767%** |

1. first
2. second

---

```
a < b
```
Plain text & more
"""


def test_markdown_becomes_html_not_text() -> None:
    def link(target: str) -> str | None:
        return "#round-2" if target.endswith("summary.md") else None

    out = to_html(SUMMARY, link, id_prefix="r2-")
    assert '<h1 id="r2-round-2-rolled-back">Round 2 — ROLLED BACK</h1>' in out
    assert '<h2 id="r2-results">Results</h2>' in out
    # a nested list, inline code escaped
    assert "<ul><li>Level: quick</li><li>Raw artifacts:<ul><li><code>" in out
    assert "<code>rounds/round-2/artifacts/&lt;b&gt;.csv</code></li></ul></li>" in out
    # a mapped link works, an unmapped one stays text (no dead link)
    assert '<a href="#round-2">the summary</a>' in out and "and gone</li>" in out
    assert "<th>Δ vs current best</th>" in out and "<td><strong>-14.767%</strong></td>" in out
    assert "<ol><li>first</li><li>second</li></ol>" in out
    assert "<hr>" in out and "<pre><code>a &lt; b</code></pre>" in out
    assert "<p>Plain text &amp; more</p>" in out
    assert "|---" not in out and "##" not in out


def test_short_text_never_cuts_a_word() -> None:
    text = "Retile the forward GEMM to 128x128 blocks so that each wave keeps its operands"
    cut = short_text(text, 40)
    assert cut == "Retile the forward GEMM to 128x128…"
    assert short_text("short one", 40) == "short one"
    assert short_text("", 40) == "—"
    assert short_text("first line\nsecond", 40) == "first line"
