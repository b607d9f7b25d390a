"""A tournament against single rounds on the demo campaign (the CPU target of
docs/benchmarks.md, "Tournaments against single rounds on the CPU demo").

Each run, in a fresh campaigns root:

1. the demo campaign's baseline (``make demo``'s manifest, 3 calibration passes), then a
   copy of the campaign with its source repository, so both start from the same head;
2. on the first copy, three single rounds through the CLI, each timed: the slow-down
   (round 2), a comment-only A/A (round 3), the speed-up (round 4), all against the
   baseline's head (the first two roll back);
3. on the second copy, one tournament of the same three entries (rounds 2-4), timed;
   the order of 2 and 3 alternates from run to run.

Expected: the slow-down and the A/A ROLLED BACK and the speed-up ACCEPTED, in the single
rounds and in the tournament.  Recorded per run: every verdict, every wall time, the
tournament's time over the single speed-up round's and over the three single rounds',
and the load average.  Every run is appended to ``--out/tournament_demo.json``;
``--summary`` counts each verdict as k of n over every run made.  Not a test.

    python benchmarks/tournament_demo.py --runs 2 --out /tmp/td
    python benchmarks/tournament_demo.py --summary --out /tmp/td
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from runner.flow.demo import PATCHES, SLOWDOWN, SPEEDUP  # noqa: E402

KERNEL = "turbo_kernels/pytorch/kernels/quantization.py"
AA = "A comment-only change (A/A): no effect on speed is expected (expected: rolled back)."
EXPECTED = {"slowdown": "ROLLED BACK", "aa": "ROLLED BACK", "speedup": "ACCEPTED"}


def baseline(root: Path) -> Path:
    """The demo campaign with its baseline under ``root``; returns its folder."""
    code = (
        "import sys; from pathlib import Path\n"
        "from runner.core.timestamps import name_stamp\n"
        "from runner.executors.local import LocalExecutor\n"
        "from runner.flow.baseline import run_baseline\n"
        "from runner.flow.demo import demo_manifest_fields\n"
        "from runner.flow.new_campaign import create_campaign, fresh_example_copy\n"
        "root = Path(sys.argv[1]); stamp = name_stamp().replace('-', '_')\n"
        "src = fresh_example_copy(root / 'sources' / 'demo')\n"
        "c = create_campaign(root / 'campaigns', demo_manifest_fields(src, stamp, 'cpu'))\n"
        "run_baseline(c, LocalExecutor(), passes=3, progress=lambda m: None)\n"
        "print(c.root)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(root)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(out.stdout.strip().splitlines()[-1])


def copy_root(root: Path, dest: Path) -> Path:
    """A copy of ``root`` (campaigns and source) whose manifest names the copies."""
    shutil.copytree(root, dest, symlinks=True)
    for manifest in (dest / "campaigns").glob("*/manifest.yaml"):
        text = manifest.read_text(encoding="utf-8").replace(str(root), str(dest))
        manifest.write_text(text, encoding="utf-8")
    return dest


def aa_patch(source: Path) -> str:
    path = source / KERNEL
    text = path.read_text(encoding="utf-8")
    path.write_text(text + "\n# a comment only\n", encoding="utf-8")
    try:
        return subprocess.run(
            ["git", "-C", str(source), "diff"], check=True, capture_output=True, text=True
        ).stdout
    finally:
        path.write_text(text, encoding="utf-8")


def validate(root: Path, name: str, n: int, entries: list[tuple[str, Path, str]]) -> float:
    """``campaign validate`` of ``entries`` (hypothesis, patch, bucket) from round n;
    returns its wall seconds."""
    argv = [
        sys.executable,
        "-m",
        "runner",
        "--campaigns-root",
        str(root / "campaigns"),
        "validate",
        "--campaign",
        name,
        "--round",
        str(n),
        "-q",
    ]
    for hypothesis, patch, bucket in entries:
        argv += ["--hypothesis", hypothesis, "--patch", str(patch), "--bucket", bucket]
    start = time.monotonic()
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - start
    if proc.returncode not in (0, 3):
        raise SystemExit(f"validate failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return seconds


def status_of(campaign: Path, n: int) -> dict[str, Any]:
    data = json.loads((campaign / "rounds" / f"round-{n}" / "result.json").read_text("utf-8"))
    gate = data.get("gate") or {}
    reasons = data.get("reasons") or [""]
    return {
        "status": data["status"],
        "delta_pct": gate.get("delta_pct"),
        "pairs": gate.get("pairs_used"),
        "reason": reasons[0][:300],
    }


def one_run(k: int) -> dict[str, Any]:
    base = Path(tempfile.mkdtemp(prefix="tournament-demo-"))
    run: dict[str, Any] = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load_before": os.getloadavg()[0],
    }
    try:
        t0 = time.monotonic()
        campaign = baseline(base / "a")
        run["baseline_s"] = round(time.monotonic() - t0, 1)
        copy_root(base / "a", base / "b")
        name = campaign.name
        source = base / "a" / "sources" / "demo"
        aa = base / "aa.patch"
        aa.write_text(aa_patch(source), encoding="utf-8")
        entries = {
            "slowdown": (SLOWDOWN[2], PATCHES / SLOWDOWN[0], SLOWDOWN[1]),
            "aa": (AA, aa, "K1"),
            "speedup": (SPEEDUP[2], PATCHES / SPEEDUP[0], SPEEDUP[1]),
        }
        order = ["slowdown", "aa", "speedup"] if k % 2 == 0 else ["aa", "slowdown", "speedup"]
        run["order"] = order
        single: dict[str, Any] = {}
        for n, key in enumerate(order, start=2):
            seconds = validate(base / "a", name, n, [entries[key]])
            single[key] = {**status_of(campaign, n), "seconds": round(seconds, 1)}
        run["single"] = single
        other = base / "b" / "campaigns" / name
        seconds = validate(base / "b", name, 2, [entries[key] for key in order])
        run["tournament"] = {
            "seconds": round(seconds, 1),
            **{key: status_of(other, n) for n, key in enumerate(order, start=2)},
        }
        summary = json.loads((other / "rounds" / "round-2" / "result.json").read_text("utf-8"))
        run["tournament"]["line"] = (summary.get("tournament") or {}).get("line")
        run["ratio_to_speedup_round"] = round(seconds / single["speedup"]["seconds"], 2)
        run["ratio_to_three_rounds"] = round(
            seconds / sum(single[key]["seconds"] for key in order), 2
        )
        run["load_after"] = os.getloadavg()[0]
    except (subprocess.CalledProcessError, SystemExit) as exc:
        run["error"] = str(exc)[-2000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return run


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    done = [r for r in runs if "error" not in r]

    def rate(where: str, key: str) -> str:
        ok = sum(1 for r in done if r[where][key]["status"] == EXPECTED[key])
        return f"{ok} of {len(runs)}"

    return {
        "runs": len(runs),
        "errors": len(runs) - len(done),
        **{f"single {key} {EXPECTED[key]}": rate("single", key) for key in EXPECTED},
        **{f"tournament {key} {EXPECTED[key]}": rate("tournament", key) for key in EXPECTED},
        "tournament / single speed-up round": [r["ratio_to_speedup_round"] for r in done],
        "tournament / three single rounds": [r["ratio_to_three_rounds"] for r in done],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--summary", action="store_true", help="Only summarise --out.")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / "tournament_demo.json"
    runs: list[dict[str, Any]] = json.loads(record.read_text()) if record.is_file() else []
    while not args.summary and len(runs) < args.runs:
        runs.append(one_run(len(runs)))
        record.write_text(json.dumps(runs, indent=2) + "\n", encoding="utf-8")
        print(json.dumps(runs[-1]), flush=True)
    print(json.dumps(summarise(runs), indent=2))


if __name__ == "__main__":
    main()
