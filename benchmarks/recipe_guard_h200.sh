#!/bin/bash
# The recipe guard where training runs the op, on one H200 (CUDA, the example's Triton
# backend): the honest blockwise FP8 GEMM passes the recipe guard (grad enabled, dgrad
# and wgrad against the blockwise backward emulation, inputs x1, x1e-3, x64) and the
# checked training step; the three planted shortcuts of tests/data/redteam (backward
# recipe downgrade, recipe switched on autograd mode, autograd-node memo) are refused
# with the guard named.  Exit 1 when a verdict is not the expected one.
export PYTHONPATH=$PWD:$PWD/examples PYTHONUNBUFFERED=1
git log -1 --format='%h %ad' --date=iso 2>/dev/null
t0=$(date +%s)
timeout 400 python3 benchmarks/recipe_guard_gpu.py; rc=$?
t1=$(date +%s); echo "recipe guard on the GPU: exit $rc, $((t1-t0)) s"
exit $rc
