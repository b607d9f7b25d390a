#!/bin/bash
# campaign profile with Nsight Compute on one H200 (docs/benchmarks.md "campaign profile on one H200"):
# a campaign of the example blockwise FP8 GEMM, a 2-pass BASELINE, a rolled-back round, its ncu profile.
# WHEELS: a folder of the pydantic wheels for the device Python (pydantic, pydantic-core, annotated-types, typing-inspection).
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/examples PYTHONUNBUFFERED=1 R=/tmp/prof/campaigns
git log -1 --format='%h %ad' --date=iso 2>/dev/null
t1=$(date +%s)
SRC=$(python3 -c 'from pathlib import Path; from runner.flow.new_campaign import fresh_example_copy; print(fresh_example_copy(Path("/tmp/prof/src")))')
timeout 200 python3 -m runner --campaigns-root $R init --source $SRC --op gemm_fp8 --granularity blockwise --gpu sm90 --shapes Llama-2-7B-qkv-mb1-4096x12288x4096,Llama-2-7B-attn_out-mb1-4096x4096x4096,Llama-2-7B-gate_up-mb1-4096x22016x4096,Llama-2-7B-down-mb1-4096x4096x11008 --no-heldout >/dev/null; timeout 150 python3 -m runner --campaigns-root $R baseline --passes 2 2>&1 | grep -E "turn|pass [0-9]|BASELINE|TFLOPS" | head -20; echo "baseline exit $?"
t2=$(date +%s); echo "init+baseline: $((t2-t1)) s"
timeout 120 python3 -m runner --campaigns-root $R validate --round 2 --hypothesis "64-row tiles, 4 warps, 4 stages fill the SMs at small M" --patch examples/gpu_patches/small_m_tile.patch -q | head -4
t3=$(date +%s); echo "validate: $((t3-t2)) s"
timeout 280 python3 -m runner --campaigns-root $R profile --round 2 --tool ncu --launch-count 40; echo "profile exit $?"
t4=$(date +%s); echo "profile: $((t4-t3)) s"
C=$(ls -d $R/gemm*/ | head -1)
tar czf $OUT/prof2.tgz -C $C profiles rounds/round-2/summary.md 2>/dev/null
cat $C/profiles/round-2/profile.md | cut -c1-260 | head -60
