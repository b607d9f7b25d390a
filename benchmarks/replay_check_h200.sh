#!/bin/bash
# The replay check on one H200 (docs/benchmarks.md "The replay check on one H200"): its GPU
# tests and the GPU engine's, then a campaign of the example blockwise FP8 GEMM (four
# Llama-2-7B mb1 targets, no held-out pick), a 2-pass BASELINE and the honest
# scalar_scale.patch round, every timed graph replay checked; then init on the 32768-row
# shapes of the model set. WHEELS: the pydantic wheels for the device Python.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site ${WHEELS:-.whl}/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD:$PWD/examples PYTHONUNBUFFERED=1 R=/tmp/rc/campaigns
git log -1 --format='%h %ad' --date=iso 2>/dev/null
t0=$(date +%s)
timeout 200 python3 -m pytest -o addopts="" -p no:cacheprovider -p no:randomly -p no:benchmark -p no:xdist -q -rs tests/test_replay_check.py tests/test_gpu_engine.py 2>&1 | tail -8
t1=$(date +%s); echo "gpu tests: $((t1-t0)) s"
SRC=$(python3 -c 'from pathlib import Path; from runner.flow.new_campaign import fresh_example_copy; print(fresh_example_copy(Path("/tmp/rc/src")))')
timeout 60 python3 -m runner --campaigns-root $R init --source $SRC --op gemm_fp8 --granularity blockwise --gpu sm90 --shapes Llama-2-7B-qkv-mb1-4096x12288x4096,Llama-2-7B-attn_out-mb1-4096x4096x4096,Llama-2-7B-gate_up-mb1-4096x22016x4096,Llama-2-7B-down-mb1-4096x4096x11008 --no-heldout >/dev/null
timeout 150 python3 -m runner --campaigns-root $R baseline --passes 2 -q | head -3
t2=$(date +%s); echo "init+baseline: $((t2-t1)) s"
timeout 150 python3 -m runner --campaigns-root $R validate --round 2 --hypothesis "one weight scale per N tile" --patch examples/gpu_patches/scalar_scale.patch -q | head -4
t3=$(date +%s); echo "validate: $((t3-t2)) s"
C=$(ls -d $R/gemm*/ | head -1)
grep -rhoE 'graph_replay|cuda_events' $C/rounds/round-2/artifacts 2>/dev/null | sort | uniq -c
BIG=$(python3 -c 'from runner.core.shapes import shape_set; print(",".join(s.label for s in shape_set("models") if s.m >= 32768))')
timeout 60 python3 -m runner --campaigns-root /tmp/rc/big init --source $SRC --op gemm_fp8 --granularity blockwise --gpu sm90 --shapes "$BIG" --no-heldout; echo "init on the 32768-row set: exit $?"
