#!/usr/bin/env bash
# The empirical peak on this card, once, and the speed-of-light veto using it
# (runner.core.empirical_peak, runner.judge.peaks).  One GPU, torch, no pydantic needed.
#   bash benchmarks/empirical_peak_h200.sh            (writes $OUT or ./empirical_peak_out)
# Look for: the bf16 (and fp8 where torch._scaled_mm runs) TFLOPS of torch.matmul at
# 8192^3; then a planted reading 1.3x the measured bf16 peak: "datasheet veto: None"
# (it is under the H200's 989 dense bf16 TFLOPS) and "empirical veto: faster than the
# hardware ... measured on this card at BASELINE".
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-./empirical_peak_out}"
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,temperature.gpu,temperature.gpu.tlimit --format=csv || true
"${PYTHON:-python3}" -m runner.bench.empirical_peak "$out/empirical_peak.json" 8192
"${PYTHON:-python3}" - "$out/empirical_peak.json" <<'PY' | tee "$out/veto.txt"
import json, sys
from runner.core.empirical_peak import EmpiricalPeak
from runner.judge.peaks import peak_for
from runner.judge.vetoes import speed_of_light_veto
peak = EmpiricalPeak.from_dict(json.load(open(sys.argv[1])))
print("record:", peak.to_dict())
for kind, value in sorted(peak.tflops.items()):
    print(f"{kind}: measured {value} TFLOPS, datasheet {peak_for(peak.gpu, kind)}")
planted = [(peak.gpu, "planted_1.3x", "bf16", round(peak.tflops["bf16"] * 1.3, 1))]
print("planted reading:", planted)
print("datasheet veto:", speed_of_light_veto(planted))
print("empirical veto:", speed_of_light_veto(planted, peak))
PY
