"""Does ``make demo`` keep its verdicts on a loaded 2-core machine?  (The CPU target of
docs/benchmarks.md, "`make demo` and `campaign accept` on the CPU under load".)

Each run, in order and in a fresh campaigns root:

1. ``--busy`` processes spin for the run's whole length (``while True: pass``: one
   core kept busy by another process, as the target says);
2. ``python -m runner demo -q``: the baseline, the slow-down round (must be ROLLED
   BACK) and the speed-up round (must be ACCEPTED), exactly as a user runs it;
3. with ``--accept``: ``python -m runner accept -q`` on that campaign (must exit 0,
   ACCEPTED).

Every run is recorded (``--out/demo_verdicts.json``, appended run by run: a command
cut short keeps the runs it finished, and the same command again goes on to ``--runs``
in all), and the summary counts each verdict as k of n over every run made, failures
included.  Not a test: a record of what the product did.

    python benchmarks/demo_verdicts.py --runs 10 --busy 1 --accept --out /tmp/dv
    python benchmarks/demo_verdicts.py --summary --out /tmp/dv
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
EXPECTED = {"round-2": "ROLLED BACK", "round-3": "ACCEPTED"}


def spinners(count: int) -> list[subprocess.Popen[bytes]]:
    """``count`` processes that each keep one core busy until killed."""
    code = "while True: pass"
    return [subprocess.Popen([sys.executable, "-c", code]) for _ in range(count)]


def verdict(campaign: Path, round_dir: str) -> dict[str, Any]:
    """The round's recorded status and gain, and the gate's reasons and pairs (so that
    a verdict that went the wrong way can be explained) (``rounds/<round>/result.json``)."""
    path = campaign / "rounds" / round_dir / "result.json"
    if not path.is_file():
        return {"status": "MISSING", "delta_pct": None}
    data = json.loads(path.read_text(encoding="utf-8"))
    gate = data.get("gate") or {}
    return {
        "status": data.get("status"),
        "delta_pct": gate.get("delta_pct"),
        "pairs": gate.get("pairs_used"),
        "reasons": gate.get("reasons"),
    }


def commit() -> str:
    """The checkout's commit (``+dirty`` with uncommitted changes): the code a run ran."""
    git = ["git", "-C", str(ROOT)]
    head = subprocess.run(
        [*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip()
    dirty = subprocess.run(
        [*git, "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return head + ("+dirty" if dirty else "")


def per_shape(campaign: Path) -> list[dict[str, Any]]:
    """From ``acceptance/acceptance.json``: each shape's base and final metric, and
    whether it is held out (the figures the held-out check judged)."""
    path = campaign / "acceptance" / "acceptance.json"
    if not path.is_file():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    held = set(data.get("heldout_shapes") or [])
    final = {s["label"]: s["value"] for s in (data.get("final_score") or {}).get("shapes", [])}
    rows = (data.get("baseline_score") or {}).get("shapes", [])
    return [
        {"label": s["label"], "base": s["value"], "final": final.get(s["label"])}
        | {"heldout": s["label"] in held}
        for s in rows
    ]


def one_run(busy: int, accept: bool, keep: Path | None) -> dict[str, Any]:
    root = Path(tempfile.mkdtemp(prefix="demo-verdicts-"))
    env = {**os.environ, "CAMPAIGN_ROOT": str(root / "campaigns")}
    env.pop("TURBO_CAMPAIGN_ROUND_CAP_S", None)  # the product's own caps
    spin = spinners(busy)
    run: dict[str, Any] = {
        "busy": busy,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "commit": commit(),
    }
    try:
        t0 = time.monotonic()
        demo = subprocess.run(
            [sys.executable, "-m", "runner", "demo", "-q"],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        run["demo_seconds"] = round(time.monotonic() - t0, 1)
        run["demo_exit"] = demo.returncode
        found = sorted((root / "campaigns").glob("gemm_fp8_blockwise_demo_*"))
        if not found:
            run["error"] = (demo.stdout + demo.stderr)[-2000:]
            return run
        campaign = found[0]
        for name in EXPECTED:
            run[name] = verdict(campaign, name)
        if accept:
            at = commit()  # the code campaign accept imports as it starts
            t1 = time.monotonic()
            acc = subprocess.run(
                [sys.executable, "-m", "runner", "accept", "-q", "--json"],
                cwd=root,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            run["accept_seconds"] = round(time.monotonic() - t1, 1)
            run["accept_exit"] = acc.returncode
            try:
                record = json.loads(acc.stdout)
            except json.JSONDecodeError:
                record = {"error": (acc.stdout + acc.stderr)[-2000:]}
            run["accept"] = {k: record.get(k) for k in ("outcome", "reasons", "error")}
            run["accept"]["commit"] = at
            run["accept"]["shapes"] = per_shape(campaign)
        if keep is not None:
            shutil.copytree(campaign, keep / f"{campaign.name}", dirs_exist_ok=True)
    finally:
        for p in spin:
            p.kill()
            p.wait()
        shutil.rmtree(root, ignore_errors=True)
    return run


def summary(runs: list[dict[str, Any]]) -> str:
    n = len(runs)
    lines = ["| what | k of n |", "|---|---|"]
    for name, want in EXPECTED.items():
        k = sum(1 for r in runs if (r.get(name) or {}).get("status") == want)
        gains = [
            r[name]["delta_pct"] for r in runs if (r.get(name) or {}).get("delta_pct") is not None
        ]
        span = f" (gains {min(gains):+.2f}% to {max(gains):+.2f}%)" if gains else ""
        lines.append(f"| {name} {want} | {k} of {n}{span} |")
    accepted = [r for r in runs if "accept_exit" in r]
    if accepted:
        k = sum(1 for r in accepted if r["accept_exit"] == 0)
        lines.append(f"| campaign accept ACCEPTED | {k} of {len(accepted)} |")
    secs = [r["demo_seconds"] for r in runs if "demo_seconds" in r]
    if secs:
        lines.append(f"| demo seconds | {min(secs):.0f} to {max(secs):.0f} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=10, help="runs in all (recorded ones count)")
    ap.add_argument("--busy", type=int, default=1, help="processes spinning beside each run")
    ap.add_argument("--accept", action="store_true", help="campaign accept after each demo")
    ap.add_argument("--keep", action="store_true", help="copy each campaign to --out")
    ap.add_argument("--summary", action="store_true", help="print the summary only")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    record = args.out / "demo_verdicts.json"
    runs: list[dict[str, Any]] = (
        json.loads(record.read_text(encoding="utf-8")) if record.is_file() else []
    )
    while not args.summary and len(runs) < args.runs:
        run = one_run(args.busy, args.accept, args.out if args.keep else None)
        runs.append(run)
        record.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
        print(f"run {len(runs)}: {json.dumps(run)}", flush=True)
    print(summary(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
