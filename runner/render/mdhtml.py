"""Markdown to HTML for the subset the runner writes (report/final_report.md, the
rounds' summary.md): ATX headings, ``---`` rules, pipe tables, bullet and numbered
lists (nested by two-space indents), fenced code, paragraphs; inline code, ``**bold**``
and ``[text](target)`` links.  Everything else is text, escaped.  ``link`` maps a link
target to the ``href`` the page uses (the report points round summaries at their
section of the same page); it returns None to keep the text without a link."""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence

LinkMap = Callable[[str], str | None]
# a backslash escape (``runner.render.escape.md_text``), code, bold, a link
_INLINE = re.compile(r"\\([#>*+\-|`\[\]_.])|`([^`]+)`|\*\*(.+?)\*\*|\[([^\]]+)\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*$")
_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+(.*)$")
_RULE = re.compile(r"^\s*(-{3,}|\*{3,})\s*$")
_SEPARATOR = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _keep(target: str) -> str | None:
    return target


def inline(text: str, link: LinkMap = _keep) -> str:
    """One line of markdown text as HTML (escaped; code, bold, links)."""
    out, pos = [], 0
    for m in _INLINE.finditer(text):
        out.append(html.escape(text[pos : m.start()]))
        escaped, code, bold, label, target = m.groups()
        if escaped is not None:
            out.append(html.escape(escaped))
        elif code is not None:
            out.append(f"<code>{html.escape(code)}</code>")
        elif bold is not None:
            out.append(f"<strong>{inline(bold, link)}</strong>")
        else:
            href = link(target)
            shown = inline(label, link)
            out.append(f'<a href="{html.escape(href)}">{shown}</a>' if href else shown)
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def _cells(line: str) -> list[str]:
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") else line
    return [c.strip() for c in line.split("|")]


def _table(lines: Sequence[str], link: LinkMap) -> str:
    head = "".join(f"<th>{inline(c, link)}</th>" for c in _cells(lines[0]))
    body = "".join(
        "<tr>" + "".join(f"<td>{inline(c, link)}</td>" for c in _cells(row)) + "</tr>"
        for row in lines[2:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _list(items: Sequence[tuple[int, str, str]], link: LinkMap) -> str:
    """Nested lists from (indent, marker, text) items."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, tag) of the open lists
    for indent, marker, text in items:
        tag = "ol" if marker[0].isdigit() else "ul"
        while stack and indent < stack[-1][0]:
            out.append(f"</li></{stack.pop()[1]}>")
        if stack and indent == stack[-1][0]:
            out.append("</li>")
        else:
            out.append(f"<{tag}>")
            stack.append((indent, tag))
        out.append(f"<li>{inline(text, link)}")
    while stack:
        out.append(f"</li></{stack.pop()[1]}>")
    return "".join(out)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def to_html(markdown: str, link: LinkMap = _keep, *, id_prefix: str = "") -> str:
    """The markdown as HTML; each heading gets ``id="<id_prefix><slug>"``."""
    lines = markdown.splitlines()
    out: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append(f"<p>{inline(' '.join(s.strip() for s in para), link)}</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        if line.lstrip().startswith("```"):
            flush()
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
            stop = len(lines) if end is None else end
            out.append(f"<pre><code>{html.escape(chr(10).join(lines[i + 1 : stop]))}</code></pre>")
            i = stop + 1
        elif not line.strip():
            flush()
            i += 1
        elif m := _HEADING.match(line):
            flush()
            level, text = len(m.group(1)), m.group(2)
            out.append(f'<h{level} id="{id_prefix}{_slug(text)}">{inline(text, link)}</h{level}>')
            i += 1
        elif _RULE.match(line):
            flush()
            out.append("<hr>")
            i += 1
        elif "|" in line and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            flush()
            j = i + 2
            while j < len(lines) and "|" in lines[j] and lines[j].strip():
                j += 1
            out.append(_table(lines[i:j], link))
            i = j
        elif _ITEM.match(line):
            flush()
            items = []
            while i < len(lines) and (m := _ITEM.match(lines[i])):
                items.append((len(m.group(1)), m.group(2), m.group(3)))
                i += 1
            out.append(_list(items, link))
        else:
            para.append(line)
            i += 1
    flush()
    return "\n".join(out)
