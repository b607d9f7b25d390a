"""Every document that code, help texts, README and docs cite exists in the repository,
and so does every section (``docs/protocol.md §5.3``) and anchor (``protocol.md#5-the-gate``)
they point at.  A user can open nothing outside the repository."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from runner.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".venv", "build", "node_modules", "campaigns", "__pycache__"}

LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+?\.md)(#[^)\s]*)?\)")
SECTION = r"§\d+(?:\.\d+)*(?:-\d+(?:\.\d+)*)?"
CITED_SECTIONS = re.compile(
    r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)`?((?:\s*(?:,|and)?\s*" + SECTION + r")+)"
)
# a path under docs/, or a file name in capitals (README.md, PROTOCOL.md, ...)
CITED_FILE = re.compile(r"(?<![\w/.-])((?:[\w.-]+/)*[\w.-]+\.md)\b")
# a section cited by its title: docs/measurement.md, "Held-out shapes"
CITED_TITLE = re.compile(r'((?:[\w.-]+/)*[\w.-]+\.md)`?,?\s*\(?"([^"\n]+)"')
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
NUMBERED = re.compile(r"^(\d+(?:\.\d+)*)\.?\s")


def _repo_files(pattern: str) -> list[Path]:
    return [p for p in ROOT.rglob(pattern) if not SKIP_DIRS.intersection(p.relative_to(ROOT).parts)]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    text = re.sub(r"[`*_\[\]()]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def headings(path: Path) -> tuple[set[str], set[str]]:
    """(anchors, section numbers) of a markdown file, code blocks left out."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    titles = HEADING.findall(text)
    numbers = {m.group(1) for t in titles if (m := NUMBERED.match(t))}
    return {slug(t) for t in titles}, numbers


def titles(path: Path) -> set[str]:
    """The headings of a markdown file without their numbers, lower case."""
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return {re.sub(r"^\d+(?:\.\d+)*\.?\s+", "", t).strip().lower() for t in HEADING.findall(text)}


def section_numbers(spec: str) -> list[str]:
    """``§9.2-9.3 and §7`` -> ["9.2", "9.3", "7"]."""
    return re.findall(r"\d+(?:\.\d+)*", spec)


def resolve(name: str, here: Path | None) -> Path | None:
    """A cited file: relative to the citing markdown file, then to the repository root,
    then under docs/; a bare name in capitals may live in any folder."""
    bases = [here.parent] if here is not None else []
    bases += [ROOT, ROOT / "docs"]
    for base in bases:
        if (base / name).is_file():
            return (base / name).resolve()
    if "/" not in name and name.split(".")[0].isupper():
        found = _repo_files(name)
        return found[0] if found else None
    return None


def _is_doc_citation(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    return name.startswith(("docs/", "../docs/")) or base.split(".")[0].isupper()


def problems_in(text: str, where: str, md_file: Path | None) -> Iterator[str]:
    """What in ``text`` cites a file, section or anchor that does not exist."""
    covered: list[tuple[int, int]] = []
    if md_file is not None:
        for m in LINK.finditer(text):
            label, target, anchor = m.group(1), m.group(2), m.group(3)
            if target.startswith(("http://", "https://")):
                continue
            covered.append(m.span())
            path = resolve(target, md_file)
            if path is None:
                yield f"{where}: link to missing {target}"
                continue
            anchors, numbers = headings(path)
            if anchor and anchor[1:] not in anchors:
                yield f"{where}: {target}{anchor}: no such heading in {target}"
            for sec in re.findall(SECTION, label):
                missing = [n for n in section_numbers(sec) if n not in numbers]
                if missing:
                    yield f"{where}: {label!r}: {target} has no section {missing}"
    for m in CITED_SECTIONS.finditer(text):
        if any(a <= m.start() < b for a, b in covered):
            continue
        covered.append(m.span())
        name = m.group(1)
        path = resolve(name, md_file)
        if path is None:
            yield f"{where}: cites missing {name}"
            continue
        _, numbers = headings(path)
        missing = [n for n in section_numbers(m.group(2)) if n not in numbers]
        if missing:
            yield f"{where}: {name}{m.group(2)}: no section {missing} in {name}"
    for m in CITED_TITLE.finditer(text):
        path = resolve(m.group(1), md_file)
        if path is None or not _is_doc_citation(m.group(1)):
            continue  # a missing file is reported below
        covered.append(m.span())
        if m.group(2).strip().lower() not in titles(path):
            yield f'{where}: {m.group(1)} has no heading "{m.group(2)}"'
    for m in CITED_FILE.finditer(text):
        if any(a <= m.start() < b for a, b in covered) or not _is_doc_citation(m.group(1)):
            continue
        if resolve(m.group(1), md_file) is None:
            yield f"{where}: cites {m.group(1)}, which is not in the repository"
    for m in re.finditer(SECTION, text):
        if any(a <= m.start() < b for a, b in covered):
            continue
        if md_file is None:
            yield f"{where}: {m.group(0)} without the file it belongs to; cite docs/<file>.md §N"
            continue
        _, numbers = headings(md_file)
        missing = [n for n in section_numbers(m.group(0)) if n not in numbers]
        if missing:
            yield f"{where}: {m.group(0)}: no section {missing} in this file"


def _markdown_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    files += sorted((ROOT / "docker").glob("*.md")) + sorted((ROOT / "examples").rglob("*.md"))
    return [f for f in files if f.is_file()]


def _help_texts() -> Iterator[tuple[str, str]]:
    root = click.Context(cli, info_name="campaign")
    yield "campaign --help", cli.get_help(root)
    for name, command in sorted(cli.commands.items()):
        yield f"campaign {name} --help", command.get_help(click.Context(command, root, name))


def test_docs_exist() -> None:
    for name in ("protocol", "measurement", "architecture", "adding-an-op"):
        assert (ROOT / "docs" / f"{name}.md").is_file(), name


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_markdown_citations_exist(path: Path) -> None:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    assert list(problems_in(text, str(path.relative_to(ROOT)), path)) == []


def test_code_citations_exist() -> None:
    problems: list[str] = []
    for path in sorted((ROOT / "runner").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        problems += problems_in(path.read_text(encoding="utf-8"), where, None)
    assert problems == []


def test_help_text_citations_exist() -> None:
    problems: list[str] = []
    for where, text in _help_texts():
        problems += problems_in(text, where, None)
    assert problems == []


def test_the_checker_catches_what_it_must(tmp_path: Path) -> None:
    bad = {
        "see PROTOCOL.md section 8": "not in the repository",
        "(docs/protocol.md §99)": "no section ['99']",
        "docs/protocol.md §8.2-8.99": "no section ['8.99']",
        "docs/nowhere.md §1": "cites missing docs/nowhere.md",
        "bucket (§9.2)": "without the file it belongs to",
        'docs/protocol.md, "Over-fitting audit"': 'has no heading "Over-fitting audit"',
    }
    for text, expected in bad.items():
        found = list(problems_in(text, "x.py", None))
        assert len(found) == 1 and expected in found[0], (text, found)
    good = (
        "docs/protocol.md §8.2-8.3 and §6.4, docs/measurement.md §4.1, README.md, "
        'docs/measurement.md, "Held-out shapes", docs/protocol.md ("The gate")'
    )
    assert list(problems_in(good, "x.py", None)) == []
    page = tmp_path / "page.md"
    page.write_text("## 1. One\n\n### 1.2 Two\n\nsee §1.2 and §3\n", encoding="utf-8")
    text = page.read_text(encoding="utf-8")
    assert [p.split(": ", 1)[1] for p in problems_in(text, "page.md", page)] == [
        "§3: no section ['3'] in this file"
    ]
    link = "[protocol.md §5](../docs/protocol.md#5-the-gate) [x](../docs/protocol.md#nope)"
    found = list(problems_in(link, "page.md", ROOT / "tests" / "page.md"))
    assert len(found) == 1 and "#nope: no such heading" in found[0], found
