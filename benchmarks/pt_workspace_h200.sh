#!/usr/bin/env bash
# On one NVIDIA H200 (docs/benchmarks.md "Primus-Turbo in workspace mode on one H200"): a workspace-mode campaign on Primus-Turbo's
# blockwise FP8 Triton GEMM (primus_turbo/triton/gemm/gemm_fp8_kernel.py at a6a16cdc,
# kernel code unchanged): init, BASELINE, one round (a num_stages change by patch).
# No docker, no network, no HIP build: the workspace's minimal stack carries the
# kernel's import path unchanged and stands in for primus_turbo.pytorch._C.
#
# Run from the turbo-campaign checkout:
#   PT_SRC=<copy of upstream's tree at a6a16cdc: at least the paths listed in
#          benchmarks/pt_workspace_h200.files, 45 files, about 0.4 MB>
#   DEPS=<folder holding pydantic (and any of click, tabulate, rich, yaml missing)>
#   bash benchmarks/pt_workspace_h200.sh
# Copy the paths with, on a machine that has the mirror:
#   git -C <Primus-Turbo clone> archive a6a16cdc $(cat benchmarks/pt_workspace_h200.files) \
#     | tar -x -C shared/pt_a6a16cdc
#
# Step 1 (under a minute) calls upstream's op from the stack once, forward then
# backward, and stops with the upstream error if either cannot run on sm90; the
# campaign measures forward and backward together (there is no forward-only mode), so
# a failing backward is reported, with the layout, instead of a campaign.
# Budget: under 8 minutes (2 baseline passes, 5 small shapes of the `cpu` set).
set -euo pipefail
PY=${PY:-python3}
PT_SRC=${PT_SRC:-shared/pt_a6a16cdc}
DEPS=${DEPS:-shared/deps}
REPO=$(pwd)
WORK=$(mktemp -d /tmp/pt_ws.XXXXXX)
# A venv over the system's torch/triton whose .pth adds this checkout and DEPS: the
# workers start with a clean environment (PYTHONPATH is not passed through), and
# `python` on PATH (the focused test's command) must be this interpreter too.
"$PY" -m venv --system-site-packages "$WORK/venv"
"$WORK/venv/bin/python" -c "import site; print(site.getsitepackages()[0])" > "$WORK/site"
# the interpreter's own site-packages too: where python3 is itself a venv (torch in it),
# --system-site-packages reaches only the base interpreter's
"$PY" -c "import site; print('\n'.join(site.getsitepackages()))" > "$WORK/parent_site"
{ printf '%s\n%s\n' "$REPO" "$(readlink -f "$DEPS")"; cat "$WORK/parent_site"; } \
  > "$(cat "$WORK/site")/turbo_campaign_deps.pth"
PY="$WORK/venv/bin/python"
export PATH="$WORK/venv/bin:$PATH"
export CAMPAIGN_ROOT="$WORK/campaigns"
campaign() { "$PY" -m runner "$@"; }
t0=$SECONDS
stamp() { echo "[$((SECONDS - t0)) s] $*"; }

"$PY" -c "import pydantic, click, yaml, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"

# 0. Upstream's files as a git checkout (the tool records and diffs commits).
cp -r "$PT_SRC" "$WORK/Primus-Turbo"
git -C "$WORK/Primus-Turbo" init -q
git -C "$WORK/Primus-Turbo" add -A
git -C "$WORK/Primus-Turbo" -c user.name=lead -c user.email=lead@localhost commit -qm "Primus-Turbo a6a16cdc (copied files)"

# 1. init: workspace mode, the focused test narrowed to the Triton blockwise cases of
#    one shape (both layouts of the forward op: NT and NN), so that a round takes minutes.
TEST='PRIMUS_TURBO_GEMM_BACKEND=TRITON python -m pytest tests/pytorch/ops/test_gemm_fp8.py -q -x -k "test_gemm_fp8_blockwise and TRITON and False and E4M3 and 1024-1024-512"'
campaign init --target primus-turbo --source "$WORK/Primus-Turbo" --op gemm_fp8 \
  --granularity blockwise --backend triton --gpu sm90 --mode workspace \
  --executor local --shape-set cpu --test-command "$TEST"
NAME=$(ls "$CAMPAIGN_ROOT" | grep -v '^workspaces$')
WS="$CAMPAIGN_ROOT/workspaces/$NAME"
stamp "init: $NAME; stand-ins:"
sed -n '/^stand_ins:/,/^[a-z]/p' "$WS/src/UPSTREAM.yaml"

# 2. Smoke: upstream's op from the stack, forward then backward (grad_X is the NN
#    layout, grad_W the TN layout of gemm_fp8_blockwise_triton_kernel).
(cd "$WS" && PYTHONPATH="$WS/src" PRIMUS_TURBO_GEMM_BACKEND=TRITON "$PY" - <<'EOF'
import sys, traceback
import torch
import primus_turbo.pytorch as turbo
from primus_turbo.pytorch.core import low_precision as lp
print("stack float8_e4m3 =", lp.float8_e4m3, "(low_precision.py picks fnuz below compute capability (9, 5))")
cfg = lp.Float8QuantConfig(format=lp.Format.E4M3, granularity=lp.ScalingGranularity.BLOCKWISE, block_size=128)
a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
try:
    out = turbo.ops.gemm_fp8(a, b, trans_b=True, config=cfg)
    torch.cuda.synchronize()
except Exception:
    traceback.print_exc(); print("STOPPED: the forward (NT layout) cannot run on sm90"); sys.exit(3)
print("forward ok", tuple(out.shape))
try:
    out.backward(torch.randn_like(out)); torch.cuda.synchronize()
except Exception:
    traceback.print_exc(); print("STOPPED: the backward (NN grad_X / TN grad_W) cannot run on sm90"); sys.exit(4)
print("backward ok")
EOF
) || { rc=$?; stamp "smoke stopped (exit $rc): record the upstream line above in the issue"; exit $rc; }
stamp "smoke passed"

# 3. BASELINE (round-1) in the workspace.
campaign baseline --campaign "$NAME" --passes 2
stamp "baseline done"

# 4. One round: on sm90 (not gfx950) the blockwise autotune space keeps num_stages
#    1 and 2; the hypothesis: num_stages=2 only (deeper pipelining always wins on
#    Hopper's large shared memory) halves autotune time without losing the best config.
K=src/primus_turbo/triton/gemm/gemm_fp8_kernel.py
(cd "$WS" && sed -i 's/        num_stage_values = \[1, 2\]$/        num_stage_values = [2]/' "$K" \
  && git diff --quiet -- "$K" && { echo "patch did not apply"; exit 5; } ; \
  git diff -- "$K" > "$WORK/round2.patch" && git checkout -q -- "$K")
cat "$WORK/round2.patch"
campaign validate --campaign "$NAME" --round 2 \
  --hypothesis "blockwise FP8 autotune on sm90: num_stages=2 only" --patch "$WORK/round2.patch" || true
stamp "round 2 closed"
campaign status --campaign "$NAME"
echo "campaign folder: $CAMPAIGN_ROOT/$NAME (copy it out before the machine is returned)"
