"""The artifact file names are spelled once, in runner/core/artifact_names.py: every
other module of runner/ and benchmarks/ imports them, so a renamed file cannot leave a
reader behind."""

from __future__ import annotations

import re
from pathlib import Path

from runner.core import artifact_names

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "runner" / "core" / "artifact_names.py"


def spelled_out(root: Path) -> list[str]:
    """``path:line`` of every quoted artifact name outside its home module."""
    names = [v for k, v in vars(artifact_names).items() if k.isupper() and isinstance(v, str)]
    quoted = re.compile("|".join(rf"[\"']{re.escape(n)}[\"']" for n in names))
    found = []
    for path in sorted([*(root / "runner").rglob("*.py"), *(root / "benchmarks").glob("*.py")]):
        if path == HOME:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if quoted.search(line):
                found.append(f"{path.relative_to(root)}:{n}")
    return found


def test_no_module_spells_out_an_artifact_name() -> None:
    assert spelled_out(ROOT) == [], "import the name from runner.core.artifact_names"


def test_the_search_finds_a_spelled_out_name(tmp_path: Path) -> None:
    (tmp_path / "runner").mkdir()
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "runner" / "m.py").write_text('x = 1\ncsv = out / "benchmark.csv"\n')
    (tmp_path / "benchmarks" / "b.py").write_text("meta = 'meta.json'\n")
    assert spelled_out(tmp_path) == ["benchmarks/b.py:1", "runner/m.py:2"]
