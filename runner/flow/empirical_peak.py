"""The BASELINE's empirical peak: the reference GEMM (``runner.worker.bench.empirical_peak``) run
on the campaign's own card through the round's executor, as a worker job in test mode,
after every timed pass.  Its record goes into the campaign root (``EMPIRICAL_PEAK``),
where the speed-of-light veto of every later round reads it (``runner.judge.peaks``):
measured FP8 on gfx950 reached about half its datasheet peak, so the datasheet alone
lets a reading twice too fast pass (docs/measurement.md §2.7).

Not on a CPU target (no speed of light there).  A record already in the campaign root is
kept: it was measured on this campaign's card before (an earlier attempt of the
BASELINE, or by hand with ``benchmarks/empirical_peak_h200.sh``)."""

from __future__ import annotations

from pathlib import Path

from runner.core.artifact_names import EMPIRICAL_PEAK
from runner.core.empirical_peak import EmpiricalPeak
from runner.core.files import read_json, write_json_atomic
from runner.core.spec import OUT_ENV
from runner.measure.host import run_job
from runner.round.context import RoundPlan

JOB = "empirical-peak"
COMMAND = f'python -m runner.worker.bench.empirical_peak "${OUT_ENV}/{EMPIRICAL_PEAK}"'


def measure_empirical_peak(rnd: RoundPlan, tree: Path) -> list[str]:
    """Measure the empirical peak on ``rnd``'s card (a GPU target only) with ``tree``'s
    environment and keep it in the campaign root; the lines the BASELINE's record gets
    (none on a CPU target)."""
    if not rnd.gpu_target:
        return []
    kept = rnd.campaign.root / EMPIRICAL_PEAK
    if kept.is_file():
        return [f"empirical peak kept from {kept.name} (measured before on this campaign)"]
    spec = rnd.template.for_pass("baseline", 0, [], mode="test", command=COMMAND)
    outcome = run_job(rnd, JOB, spec, tree)
    doc = read_json(outcome.out_dir / EMPIRICAL_PEAK)
    peak = EmpiricalPeak.from_dict(doc) if isinstance(doc, dict) else None
    if outcome.returncode != 0 or peak is None or not peak.gpu or not peak.tflops:
        log = outcome.out_dir / "test.log"
        return [
            f"empirical peak not measured (exit {outcome.returncode}, see {log}): the "
            "speed-of-light veto uses the datasheet's peaks; measure it with "
            "`benchmarks/empirical_peak_h200.sh` and copy its record to "
            f"{kept} to tighten it"
        ]
    write_json_atomic(kept, peak.to_dict())
    rates = ", ".join(f"{dtype} {value:g} TFLOPS" for dtype, value in sorted(peak.tflops.items()))
    return [
        f"empirical peak on {peak.gpu}: {rates} (the reference GEMM at "
        f"{'x'.join(map(str, peak.shape))}); a reading above it by more than the margin is "
        "vetoed as faster than the hardware"
    ]
