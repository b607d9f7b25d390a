#!/bin/bash
# The op memory figure against the peak a GPU serving worker measures, per shape, on one H200
# (docs/benchmarks.md "Worker memory: the op figure against the measured peak"); also the
# sealed held-out pick in the manifest. WHEELS: the pydantic wheels for the device Python.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/examples PYTHONUNBUFFERED=1 R=/tmp/cal/campaigns
t0=$(date +%s)
timeout 40 python3 -m pytest -o addopts="" -p no:cacheprovider -p no:randomly -p no:benchmark -p no:xdist -q "tests/test_memory_plan.py::test_a_gpu_worker_measures_each_shapes_peak" 2>&1 | tail -4
t1=$(date +%s); echo "gpu tests: $((t1-t0)) s"
SRC=$(python3 -c 'from pathlib import Path; from runner.flow.new_campaign import fresh_example_copy; print(fresh_example_copy(Path("/tmp/cal/src")))')
timeout 60 python3 -m runner --campaigns-root $R init --source $SRC --op gemm_fp8 --granularity blockwise --gpu sm90 --shapes Llama-2-7B-qkv-mb1-4096x12288x4096,Llama-2-7B-attn_out-mb1-4096x4096x4096,Llama-2-7B-gate_up-mb1-4096x22016x4096,Llama-2-7B-down-mb1-4096x4096x11008 2>&1 | grep -i "held-out\|sealed" | head -3
timeout 150 python3 -m runner --campaigns-root $R baseline --passes 2 -q | head -3
t2=$(date +%s); echo "init+baseline: $((t2-t1)) s"
timeout 150 python3 -m runner --campaigns-root $R validate --round 2 --hypothesis "one weight scale per N tile" --patch examples/gpu_patches/scalar_scale.patch -q | head -4
t3=$(date +%s); echo "validate: $((t3-t2)) s"
C=$(ls -d $R/gemm*/ | head -1)
python3 - "$C" <<'PY'
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).rglob("memory*.json")):
    doc = json.loads(path.read_text())
    print(path.relative_to(sys.argv[1]), "pool", doc.get("pool"))
    for label, row in (doc.get("shapes") or {}).items():
        est, meas = row.get("estimate"), row.get("measured")
        r = f"{meas/est:.2f}" if est and meas else "-"
        print(f"  {label}: estimate {est/2**30 if est else 0:.3f} GiB measured {meas/2**30 if meas else 0:.3f} GiB ratio {r}")
PY
grep -c "" $C/manifest.yaml; grep -n "heldout" $C/manifest.yaml
