"""A stand-in ``amd-smi`` executable for tests: it prints a recorded sample of the real
tool's output (tests/data/amd_smi_bus) for the sub-command it is given, so the product's
real reader runs it as a subprocess.  ``install`` writes it onto a PATH folder."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

BUS_DATA = Path(__file__).parent / "data" / "amd_smi_bus"
KFD = Path(__file__).parent / "data" / "kfd_topology" / "nodes"

SCRIPT = """#!{python}
import sys
samples = {samples!r}
args = [a for a in sys.argv[1:] if a != "--json"]
key = " ".join(args)
if key not in samples:
    sys.stderr.write("amd-smi: unexpected arguments " + key + "\\n")
    sys.exit(2)
import os
count = os.path.join(os.path.dirname(os.path.abspath(__file__)), key.replace(" ", "_") + ".n")
n = int(open(count).read()) if os.path.exists(count) else 0
open(count, "w").write(str(n + 1))
files = samples[key]
sys.stdout.write(open(files[min(n, len(files) - 1)]).read())
"""


def install(
    bin_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    metrics: tuple[str, ...] = ("amd_smi_metric_mi300x.json",),
) -> Path:
    """An ``amd-smi`` answering ``list``, ``metric`` and ``static --limit`` from the
    recorded samples, first on PATH; the KFD topology sample as the host's.  Its n-th
    ``metric`` call prints ``metrics[n]`` (the last one from then on): a card that
    cools."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    samples = {
        "list": [str(BUS_DATA / "amd_smi_list_mi300x.json")],
        "metric": [str(BUS_DATA / m) for m in metrics],
        "static --limit": [str(BUS_DATA / "amd_smi_static_limit_mi300x.json")],
    }
    exe = bin_dir / "amd-smi"
    exe.write_text(SCRIPT.format(python=sys.executable, samples=samples))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("TURBO_CAMPAIGN_KFD_TOPOLOGY", str(KFD))
    return exe
