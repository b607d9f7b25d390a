"""A/A and A/B gate study (part 2 of benchmarks/timing_fidelity.py, which runs it).

Incumbent A: bf16 torch.matmul on the four fidelity shapes.  Candidate: A again (A/A) or
B, A made ~3% slower on every shape (A/B):

* shapes under 0.5 ms: B does 3 extra GEMM calls in every 100 (calls 0, 33, 66 mod 100),
  so the mean per-call time of any batch or graph of a multiple of 100 calls is exactly
  3% higher (a separate kernel cannot cost only 3% of a few-microsecond GEMM: a launch
  alone costs more).  The engine's graphs are 200 calls for these shapes; the study pins
  4096^3's batch to 200 calls (``iters_per_repeat``) for A and B alike;
* longer shapes (8192^3): an extra elementwise kernel (``buf[:n].add_(1)``) after each
  call, ``n`` calibrated in the run in closed loop (time A and B, rescale ``n``) to make
  B 3% slower.  Open-loop sizing falls short on an H200 at its power cap: the cheap
  kernel lowers the average power and the GEMM clocks up.

Each round measures incumbent and candidate back to back (pair order alternating), each
pass timing every shape with our engine and with the upstream quick template.  Verdicts:
the upstream literal rule (accept at +2% geomean, reject when a shape drops 5%) on the
quick template's numbers and on the engine's, and runner.judge.gate.decide (sigma_G from the
calibration passes; NEEDS_REMEASURE answered with fresh interleaved pairs) on the
engine's.  Passes run in one process (fresh processes would not fit the time box).
"""

from __future__ import annotations

import time
from typing import Any

from canary import CanaryBand, canary_drifted, run_canary
from matmul_timing import SHAPES, label, quick_template_ms, tflops

from runner.core.outcomes import Decision, PairSample, Score, ShapeScore
from runner.core.stats import geomean, median
from runner.judge.gate import calibrate_sigma, decide
from runner.worker.bench.timing import TimingSettings, measure

STUDY_SETTINGS = TimingSettings(warmup_s=0.1, batch_s=0.025, budget_s=1.0, max_repeats=12)
PINNED_200 = TimingSettings(
    warmup_s=0.1, batch_s=0.025, budget_s=1.0, max_repeats=12, iters_per_repeat=200
)
SLOWDOWN = 0.03
KERNEL_MIN_MS = 0.5
MAX_PAIRS = 5


class SlowerCalls:
    """A with 3 extra calls in every 100 (exactly +3% per 100 or 200 calls)."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.i = fn, 0

    def __call__(self) -> Any:
        if self.i % 100 in (0, 33, 66):
            self.fn()
        self.i += 1
        return self.fn()


def _make_inputs(torch: Any) -> dict[str, Any]:
    fns = {}
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        fns[label((m, n, k))] = lambda a=a, b=b: torch.matmul(a, b)
    return fns


def _settings(lb: str) -> TimingSettings:
    return PINNED_200 if lb == "4096x4096x4096" else STUDY_SETTINGS


def _time_ms(fn: Any, lb: str = "") -> float:
    return measure(fn, _settings(lb), "cuda").median_ms


def _make_slower(torch: Any, fns: dict[str, Any], base_ms: dict[str, float]) -> tuple:
    """Variant B per shape, how each was made slower, and the calibration steps."""
    buf = torch.zeros(96 << 20, device="cuda", dtype=torch.float32)
    slower, how, steps = {}, {}, {}
    for lb, fn in fns.items():
        if base_ms[lb] < KERNEL_MIN_MS:
            slower[lb] = SlowerCalls(fn)
            how[lb] = {"kind": "3 extra calls per 100"}
            continue
        n = _elements_for(torch, buf, SLOWDOWN * base_ms[lb])
        steps[lb] = []
        for _ in range(4):
            slow = _with_kernel(fn, buf[:n])
            ratio = _time_ms(slow, lb) / _time_ms(fn, lb) - 1.0
            steps[lb].append({"elements": n, "slowdown": ratio})
            if abs(ratio - SLOWDOWN) < 0.003:
                break
            n = int(n * min(4.0, max(0.25, SLOWDOWN / max(ratio, 0.0075))))
            n = max(1 << 16, min(buf.numel(), n))
        slower[lb] = slow
        how[lb] = {"kind": "extra elementwise kernel", "elements": steps[lb][-1]["elements"]}
    return slower, how, {"closed_loop": steps}


def _elements_for(torch: Any, buf: Any, target_ms: float) -> int:
    """Open-loop first guess: elements of ``add_`` that cost ``target_ms`` (linear fit)."""
    n1, n2 = 4 << 20, 64 << 20
    t1 = _time_ms(lambda: buf[:n1].add_(1.0))
    t2 = _time_ms(lambda: buf[:n2].add_(1.0))
    slope = (t2 - t1) / (n2 - n1)
    return max(1 << 16, min(buf.numel(), int((target_ms - (t1 - slope * n1)) / slope)))


def _with_kernel(fn: Any, view: Any) -> Any:
    def slow() -> Any:
        out = fn()
        view.add_(1.0)
        return out

    return slow


def _pass(fns: dict[str, Any], torch: Any) -> dict[str, dict[str, float]]:
    """One pass: every shape by our engine, then by the quick template (TFLOPS)."""
    shapes = dict(zip([label(s) for s in SHAPES], SHAPES, strict=True))
    engine = {lb: tflops(shapes[lb], _time_ms(fn, lb)) for lb, fn in fns.items()}
    quick = {lb: tflops(shapes[lb], quick_template_ms(fn, torch)) for lb, fn in fns.items()}
    return {"engine": engine, "quick": quick}


def literal_rule(inc: dict[str, float], cand: dict[str, float]) -> str:
    """Upstream rule: a shape down 5% -> reject; else accept at +2% geomean."""
    ratios = [cand[lb] / inc[lb] for lb in inc]
    if any(r <= 0.95 for r in ratios):
        return "reject_regression"
    return "accept" if geomean(ratios) >= 1.02 else "reject"


def _score(values: dict[str, float]) -> Score:
    shapes = tuple(ShapeScore(lb, "PASS", v) for lb, v in values.items())
    return Score("TFLOPS", geomean(values.values()), shapes, len(shapes), 0)


def _measure_pair(a: Any, c: Any, torch: Any, incumbent_first: bool) -> tuple:
    if incumbent_first:
        pa = _pass(a, torch)
        pc = _pass(c, torch)
    else:
        pc = _pass(c, torch)
        pa = _pass(a, torch)
    return pa, pc


def _round(kind: str, r: int, a: Any, c: Any, sigma_g: float, torch: Any) -> dict[str, Any]:
    pa, pc = _measure_pair(a, c, torch, r % 2 == 0)
    res = decide(_score(pa["engine"]), _score(pc["engine"]), sigma_g=sigma_g)
    pairs: list[PairSample] = []
    while res.decision is Decision.NEEDS_REMEASURE and len(pairs) < MAX_PAIRS:
        qa, qc = _measure_pair(a, c, torch, (r + len(pairs) + 1) % 2 == 0)
        pairs.append(PairSample(qa["engine"], qc["engine"]))
        res = decide(_score(pa["engine"]), _score(pc["engine"]), sigma_g=sigma_g, pairs=pairs)
    return {
        "kind": kind,
        "round": r,
        "incumbent": pa,
        "candidate": pc,
        "literal_quick": literal_rule(pa["quick"], pc["quick"]),
        "literal_engine": literal_rule(pa["engine"], pc["engine"]),
        "gate": res.decision.value,
        "gate_reasons": list(res.reasons),
        "gate_delta_pct": res.delta_pct,
        "pairs": [p.to_dict() for p in pairs],
    }


def _canary_band(n: int) -> tuple[CanaryBand, list[dict[str, Any]]]:
    readings = [run_canary("cuda") for _ in range(n)]
    return CanaryBand.calibrate(readings), readings


def run_study(rounds: int, calib_passes: int, deadline: float) -> dict[str, Any]:
    import torch

    torch.manual_seed(99)
    band, canary_start = _canary_band(3)
    fns = _make_inputs(torch)
    calib = [_pass(fns, torch) for _ in range(calib_passes)]
    sigma_g, sigma_s = calibrate_sigma([p["engine"] for p in calib])
    sigma_q, _ = calibrate_sigma([p["quick"] for p in calib])
    base_ms = {lb: median([_ms_of(lb, p["engine"][lb]) for p in calib]) for lb in fns}
    slower, how, calib_info = _make_slower(torch, fns, base_ms)
    print(f"study: sigma_G engine {100 * sigma_g:.3f}%, quick {100 * sigma_q:.3f}%", flush=True)
    results: list[dict[str, Any]] = []
    t_round = 0.0
    for r in range(rounds):
        for kind, cand in (("A/A", fns), ("A/B", slower)):
            if time.perf_counter() + 1.5 * t_round > deadline:
                break
            t0 = time.perf_counter()
            results.append(_round(kind, r, fns, cand, sigma_g, torch))
            t_round = max(t_round, time.perf_counter() - t0)
    end = run_canary("cuda")
    return {
        "settings": STUDY_SETTINGS.to_dict(),
        "settings_4096": PINNED_200.to_dict(),
        "sigma_g_engine": sigma_g,
        "sigma_s_engine": sigma_s,
        "sigma_g_quick": sigma_q,
        "calibration_passes": calib,
        "slowdown": {"how": how, **calib_info, "measured": _measured_slowdown(results)},
        "canary": {
            "band": band.to_dict(),
            "start": canary_start,
            "end": end,
            "end_drifted": canary_drifted(end, band),
        },
        "rounds": results,
        "counts": _counts(results),
    }


def _ms_of(lb: str, tf: float) -> float:
    m, n, k = (int(x) for x in lb.split("x"))
    return 2.0 * m * n * k / (tf * 1e12) * 1e3


def _measured_slowdown(results: list[dict[str, Any]]) -> dict[str, float]:
    """Per shape, the median over A/B rounds of 1 - B/A on the engine's first pair."""
    ab = [r for r in results if r["kind"] == "A/B"]
    if not ab:
        return {}
    labels = list(ab[0]["incumbent"]["engine"])
    out = {}
    for lb in labels:
        ratios = [r["candidate"]["engine"][lb] / r["incumbent"]["engine"][lb] for r in ab]
        out[lb] = 1.0 - median(ratios)
    geo = [
        geomean(r["candidate"]["engine"][lb] / r["incumbent"]["engine"][lb] for lb in labels)
        for r in ab
    ]
    out["geomean"] = 1.0 - median(geo)
    return out


def _counts(results: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, int]]]:
    counts: dict[str, dict[str, dict[str, int]]] = {}
    for r in results:
        per = counts.setdefault(r["kind"], {"rounds": {"n": 0}})
        per["rounds"]["n"] += 1
        for rule in ("literal_quick", "literal_engine", "gate"):
            verdicts = per.setdefault(rule, {})
            verdicts[r[rule]] = verdicts.get(r[rule], 0) + 1
        pairs = per.setdefault("gate_pairs", {})
        key = str(len(r["pairs"]))
        pairs[key] = pairs.get(key, 0) + 1
    return counts


def study_table(study: dict[str, Any]) -> str:
    lines = [
        f"sigma_G (engine) {100 * study['sigma_g_engine']:.3f}%, "
        f"(quick template) {100 * study['sigma_g_quick']:.3f}%; measured B slowdown "
        + ", ".join(f"{k} {100 * v:.2f}%" for k, v in study["slowdown"]["measured"].items()),
        "",
        "| study | rule (numbers) | rounds | accepted | rejected: shape -5% "
        "| rejected: other | extra pairs measured |",
        "|---|---|---|---|---|---|---|",
    ]
    names = {
        "literal_quick": "literal 2%/5% (quick template)",
        "literal_engine": "literal 2%/5% (our engine)",
        "gate": "runner.judge.gate.decide (our engine)",
    }
    for kind, per in study["counts"].items():
        n = per["rounds"]["n"]
        for rule, name in names.items():
            v = per[rule]
            acc = sum(c for d, c in v.items() if d in ("accept", "ACCEPTED", "ACCEPTED_TRADEOFF"))
            reg = v.get("reject_regression", 0)
            if rule == "gate":
                reg = sum(
                    1
                    for r in study["rounds"]
                    if r["kind"] == kind
                    and r["gate"] == "ROLLED_BACK"
                    and any("5% or more" in x for x in r["gate_reasons"])
                )
            extra = ", ".join(f"{k}:{c}" for k, c in sorted(per["gate_pairs"].items()))
            lines.append(
                f"| {kind} | {name} | {n} | {acc} | {reg} | {n - acc - reg} "
                f"| {extra if rule == 'gate' else '-'} |"
            )
    canary = study["canary"]
    lines.append(
        f"\ncanary drifted at the end: {canary['end_drifted']} "
        f"(gemm {canary['end']['gemm_tflops']:.0f} TFLOPS, copy {canary['end']['copy_gbs']:.0f}"
        " GB/s)"
    )
    return "\n".join(lines)
