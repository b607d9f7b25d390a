"""Several worker passes of the same code, merged into the round's pinned CSV.

Per shape: the median forward and backward time across passes (TFLOPS recomputed
from it), the stddev of the per-pass TFLOPS as the ``*_stddev`` columns, the worst
SNR, and FAIL when any pass FAILed.  The raw per-pass CSVs stay in ``artifacts/``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

from runner.core.csv_io import read_csv, write_csv
from runner.core.csv_schema import SHAPE_COLUMNS, BenchCSV, Row, Schema
from runner.core.errors import ConfigError
from runner.core.outcomes import PairSample
from runner.core.pass_meta import read_meta
from runner.core.samples import Simulation, StateReport, samples_beside
from runner.core.stats import geomean, median, stdev
from runner.judge.scoring import score

_FWD_T, _BWD_T = "Forward Time (ms)", "Backward Time (ms)"


def read_passes(paths: Sequence[Path], pinned: str | None) -> list[BenchCSV]:
    csvs = [read_csv(p, pinned=pinned) for p in paths]
    labels = csvs[0].labels()
    for csv in csvs[1:]:
        if csv.labels() != labels:
            raise ConfigError(f"pass {csv.path} covers other shapes than {csvs[0].path}")
    return csvs


def merge_rows(csvs: Sequence[BenchCSV]) -> list[dict[str, object]]:
    """One row per shape from several passes (see the module docstring)."""
    columns = zip(*(c.rows for c in csvs), strict=True)
    return [_merge_one(list(rows), csvs[0].schema) for rows in columns]


def _merge_one(rows: list[Row], schema: Schema) -> dict[str, object]:
    first = rows[0]
    out: dict[str, object] = dict(first.values)
    if any(not r.passed for r in rows):
        out.update({c: "nan" for c in schema.columns if c not in SHAPE_COLUMNS})
        out["Check"] = "FAIL"
        return out
    out["Check"] = "PASS"
    for time_col, metric, std in _time_columns(schema):
        times = [r.number(time_col) for r in rows]
        if any(t is None or math.isnan(t) for t in times):
            continue
        values = [r.number(metric) for r in rows]
        work = [v * t for v, t in zip(values, times, strict=True) if v is not None and t]
        med_t = median([t for t in times if t is not None])
        out[time_col] = med_t
        out[metric] = median(work) / med_t if work else out[metric]
        per_pass = [v for v in values if v is not None]
        out[std] = stdev(per_pass) if len(per_pass) > 1 else first.number(std)
    for col in schema.columns:
        if col.endswith("_snr") or col == "max_abs_err":
            nums = [r.number(col) for r in rows]
            finite = [n for n in nums if n is not None and not math.isnan(n)]
            if finite:
                out[col] = min(finite) if col.endswith("_snr") else max(finite)
    return out


def _time_columns(schema: Schema) -> list[tuple[str, str, str]]:
    unit = "GB/s" if schema.kind == "memory" else "TFLOPS"
    return [
        (_FWD_T, f"Forward {unit}", f"Forward {unit}_stddev"),
        (_BWD_T, f"Backward {unit}", f"Backward {unit}_stddev"),
    ]


def write_merged(path: Path, csvs: Sequence[BenchCSV]) -> BenchCSV:
    write_csv(path, csvs[0].schema, merge_rows(csvs))
    return read_csv(path, pinned=csvs[0].header)


def per_pass_metric(csvs: Sequence[BenchCSV], metric: str) -> list[dict[str, float]]:
    """The primary metric per shape for each pass (PASS rows only)."""
    result = []
    for csv in csvs:
        s = score(csv, metric)
        result.append({x.label: x.value for x in s.shapes if x.value is not None})
    return result


def pair_samples(
    incumbent: Sequence[BenchCSV], candidate: Sequence[BenchCSV], metric: str
) -> list[PairSample]:
    """Pass i of the incumbent paired with pass i of the candidate (same block)."""
    inc = per_pass_metric(incumbent, metric)
    cand = per_pass_metric(candidate, metric)
    return [PairSample(i, c) for i, c in zip(inc, cand, strict=True) if i and c]


def pair_gain(paths: Sequence[Path], *, pinned: str | None, metric: str) -> float | None:
    """One finished pair's reading: the geomean gain (%) of the candidate (second CSV)
    over the incumbent (first) on the shapes both passed."""
    csvs = read_passes(paths, pinned)
    inc, cand = per_pass_metric(csvs, score(csvs[0], metric).metric)
    ratios = [cand[k] / inc[k] for k in inc if k in cand and inc[k] > 0 and cand[k] > 0]
    return 100.0 * (geomean(ratios) - 1.0) if ratios else None


def fresh_step_ms(csv_path: Path) -> dict[str, float]:
    """Median real-training-step time per shape of one pass, less the median time of
    drawing its fresh inputs (both from the ``samples.json`` beside its CSV; the draw
    costs the same on both sides and would only dilute a gain); empty when the pass did
    not measure it."""
    data = samples_beside(csv_path)
    out: dict[str, float] = {}
    for label, raw in (data or {}).get("shapes", {}).items():
        fresh = raw.get("fresh_step")
        if fresh:
            draw = raw.get("fresh_draw")
            draw_ms = float(draw.get("median_ms", 0.0)) if draw else 0.0
            step = float(fresh["median_ms"])
            out[label] = max(step - draw_ms, 0.1 * step)
    return out


def idiom_step_ms(csv_path: Path) -> dict[str, float]:
    """Forward plus backward time per PASS shape of one pass in the benchmark idiom
    (the pass's own CSV); empty when it has no time columns."""
    try:
        csv = read_csv(csv_path, pinned=None)
    except (ConfigError, OSError):
        return {}
    out = {}
    for row in csv.rows:
        times = [row.number(c) for c in (_FWD_T, _BWD_T) if c in csv.schema.columns]
        finite = [t for t in times if t is not None and math.isfinite(t) and t > 0]
        if row.passed and finite:
            out[row.label] = sum(finite)
    return out


def transferred_ratio(base_ms: float, inc_ms: float, cand_ms: float) -> float:
    """The idiom's incumbent/candidate ratio that the real-training step supports:
    the time the candidate saves per real step (incumbent minus candidate, in ms)
    taken off the idiom's incumbent time.  A genuine change saves the same
    milliseconds in both, whatever else the real step does (drawing inputs, the
    optimizer step), so its ratio carries over in full; a gain that lives on reused
    tensors or values saves nothing in the real step and carries over as 1.0."""
    saved = inc_ms - cand_ms
    return base_ms / max(base_ms - saved, 0.05 * base_ms)


def fresh_gains(incumbent: Sequence[Path], candidate: Sequence[Path]) -> list[float]:
    """Paired like the benchmark: for pass i of the incumbent and pass i of the
    candidate (same block), the geomean over shapes of the ratio the real-training
    step supports (``transferred_ratio``, on the incumbent pass's idiom time), minus
    one (a fraction).  Without idiom times, the plain ratio of real-step times.  Empty
    without fresh samples."""
    gains = []
    for inc_path, cand_path in zip(incumbent, candidate, strict=False):
        inc, cand = fresh_step_ms(inc_path), fresh_step_ms(cand_path)
        base = idiom_step_ms(inc_path)
        labels = sorted(set(inc) & set(cand))
        ratios = [
            transferred_ratio(base[lb], inc[lb], cand[lb]) if lb in base else inc[lb] / cand[lb]
            for lb in labels
        ]
        if ratios:
            gains.append(geomean(ratios) - 1.0)
    return gains


def state_report(csv_paths: Sequence[Path]) -> StateReport:
    """What the worker's state probe found over the passes of one role: the kept state
    written by a training step (paths), and the 8-step simulation of the first shape
    that ran it (``runner.worker.bench.statecheck``)."""
    written: list[str] = []
    simulation: Simulation | None = None
    label = ""
    for path in csv_paths:
        shapes = (samples_beside(path) or {}).get("shapes", {})
        for name, raw in shapes.items():
            state = raw.get("state")
            if not state or not state.get("stateful"):
                continue
            written += [w for w in state.get("written", []) if w not in written]
            if simulation is None and state.get("simulation"):
                simulation, label = state["simulation"], name
    return {"written": written[:8], "simulation": simulation, "shape": label}


def check_problems(csv_paths: Sequence[Path], limit: int = 5) -> list[str]:
    """The correctness problems the worker recorded (``samples.json`` beside each
    pass's CSV): why a shape FAILed, for the round's reasons.  At most ``limit``."""
    found: list[str] = []
    for path in csv_paths:
        shapes = (samples_beside(path) or {}).get("shapes", {})
        for label, raw in shapes.items():
            problems = [p for c in raw.get("checks", []) for p in c.get("problems", [])]
            problems += [str(p) for p in raw.get("integrity_problems", [])]
            if raw.get("error"):
                problems.append(str(raw["error"]))
            for problem in problems:
                line = f"{label}: {problem.splitlines()[0]}"
                if line not in found:
                    found.append(line)
    return found[:limit]


def shape_seconds(csv_paths: Sequence[Path]) -> dict[str, float]:
    """Per shape, the median over the baseline's passes of the seconds its worker spent
    on it (``samples.json``): what sharding balances, as a shape's cost is mostly its
    timing budget and compile, not its FLOPs."""
    per_shape: dict[str, list[float]] = {}
    for path in csv_paths:
        samples = samples_beside(path)  # a sharded pass: its shards' records merged
        for label, raw in (samples or {}).get("shapes", {}).items():
            seconds = raw.get("seconds")
            if seconds:
                per_shape.setdefault(label, []).append(float(seconds))
    return {label: round(median(values), 3) for label, values in per_shape.items()}


def light_readings(
    csvs: Sequence[BenchCSV], precision: str, device_of: Sequence[BenchCSV]
) -> list[tuple[str, str, str, float]]:
    """What the speed-of-light check judges in one role's passes ``csvs``: per PASS row
    and TFLOPS column, ``(gpu, label, precision, value)``.  The GPU's name is read from
    the ``meta.json`` of the passes ``device_of`` (the incumbent's, on the same device:
    a candidate's own worker writes its own ``meta.json``, and a name left out there
    must not switch the check off); none on the CPU: no readings.  GB/s columns are not
    judged: a memory op whose bytes stay in the cache can read above the HBM peak
    honestly."""
    gpu = next((g for g in map(_gpu_name, device_of) if g), None)
    if not gpu:
        return []
    out: list[tuple[str, str, str, float]] = []
    for csv in csvs:
        rates = [c for c in csv.schema.columns if c.endswith("TFLOPS")]
        for row in csv.rows:
            for column in rates:
                value = row.number(column)
                if row.passed and value is not None and math.isfinite(value):
                    out.append((gpu, row.label, precision, value))
    return out


def _gpu_name(csv: BenchCSV) -> str | None:
    """The GPU a pass ran on, from the ``meta.json`` beside its CSV (None on the CPU)."""
    meta = read_meta(csv.path.parent) if csv.path is not None else None
    return meta.gpu_name if meta is not None else None
