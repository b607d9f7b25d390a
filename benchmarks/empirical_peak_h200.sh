#!/usr/bin/env bash
# The empirical peak on this card, once, and the speed-of-light veto using it
# (runner.core.empirical_peak, runner.judge.peaks).  One GPU, torch, no pydantic needed.
#   bash benchmarks/empirical_peak_h200.sh            (writes $OUT or ./empirical_peak_out)
# Look for: the bf16 (and fp8 where torch._scaled_mm runs) TFLOPS of torch.matmul at
# 8192^3; then, per kind, a planted reading halfway between the measured peak plus its
# margin and the datasheet's: "datasheet veto: None" and "empirical veto: faster than
# the hardware ... measured on this card at BASELINE".  Given a recorded peak
# (EMPIRICAL_PEAK_JSON=path) it skips the measurement and judges the readings only.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-./empirical_peak_out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,temperature.gpu.tlimit --format=csv || true
peak_json="${EMPIRICAL_PEAK_JSON:-$out/empirical_peak.json}"
[ -n "${EMPIRICAL_PEAK_JSON:-}" ] || "${PYTHON:-python3}" -m runner.worker.bench.empirical_peak "$peak_json" 8192
"${PYTHON:-python3}" - "$peak_json" <<'PY' | tee "$out/veto.txt"
import json, sys
from runner.core.empirical_peak import EmpiricalPeak
from runner.judge.peaks import peak_for
from runner.judge.vetoes import speed_of_light_veto
peak = EmpiricalPeak.from_dict(json.load(open(sys.argv[1])))
print("record:", peak.to_dict())
for kind, value in sorted(peak.tflops.items()):
    print(f"{kind}: measured {value} TFLOPS, datasheet {peak_for(peak.gpu, kind)}")
for kind, value in sorted(peak.tflops.items()):
    datasheet = peak_for(peak.gpu, kind)
    bound = peak.limit(peak.gpu, kind)
    # a reading between the empirical bound and the datasheet peak: the one the
    # datasheet lets through and the measured peak refuses (none where the card's
    # measured peak plus the margin reaches its datasheet)
    if datasheet is None or bound is None or bound >= datasheet:
        print(f"{kind}: bound {bound} >= datasheet {datasheet}: no reading between them")
        continue
    planted = [(peak.gpu, f"planted_{kind}", kind, round((bound + datasheet) / 2, 1))]
    print(f"{kind}: planted reading {planted[0][3]} TFLOPS, between the bound {bound:.1f} "
          f"and the datasheet {datasheet}")
    print("  datasheet veto:", speed_of_light_veto(planted))
    print("  empirical veto:", speed_of_light_veto(planted, peak))
PY
