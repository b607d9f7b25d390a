#!/usr/bin/env bash
# The first real campaign on one NVIDIA H200: upstream Primus-Turbo's blockwise FP8 Triton
# GEMM (primus_turbo/triton/gemm/gemm_fp8_kernel.py at a6a16cdc, never edited by this
# script: only the round patches change it, through the tool) in workspace mode, with the
# stack's platform layer for CUDA (OCP FP8, no AMD-only launch options; recorded as a
# non-AMD run).  Upstream's loop: BASELINE and full validation run upstream's
# benchmark/ops/training/bench_gemm_turbo.py (narrowed with its own --num-shards/--shard-id
# to a handful of rows), quick rounds run the campaign's quick_test_bench.py (upstream's
# template, copied at init) on the representative shapes.
#
# Phases (state kept between device calls; on an H100 at ba0d182 setup took 84 s, a 4-pass
# BASELINE 173 s, a round 142-358 s (358 s when the candidate's autotune space is new),
# accept 96 s and reproduce 356 s: BUDGET_S 200, 200, 380, 300 ran them in four calls):
#   setup     venv, upstream's files as a git checkout, the shard's rows, init, smoke
#   baseline  campaign baseline (round-1)
#   round2    num_warps 8 for 128-row tiles off AMD (two warpgroups share the fp32
#             accumulator and the scaled partial that one warpgroup spills on sm90):
#             expected ACCEPTED
#   round3    num_stages 1 only (no software pipelining): expected ROLLED BACK
#   (the run at ba0d182 had round2_num_stages_3.patch as its round 2: ROLLED BACK)
#   round4    B's blockwise scale left out (a wrong scale): expected FAILED (correctness;
#             not counted as a round), then `campaign isa --round 2`
#   accept    campaign accept (the integration gate in upstream's tree: the kernel synced
#             back, upstream's focused test)
#   finish    report (its "Platform: non-AMD run" note shown), export
#   autotunecost (on demand only, after setup) one training step's autotunes split into
#             compile and timing, compiled one by one and side by side
#   statecheck (on demand only) what a training step of upstream's op writes into the
#             state its package keeps: the 8-step simulation's evidence, path by path
#   reproduce the bundle replayed and re-measured on a second, fresh campaigns root
#
# Run from the turbo-campaign checkout, once per device call, until it prints
# "ALL PHASES DONE" (it runs the next pending phases while under BUDGET_S seconds):
#   bash benchmarks/pt_upstream_h200.sh            # or: ... .sh <phase> to run one phase
# Environment:
#   PT_SRC   upstream's files at a6a16cdc (the paths in benchmarks/pt_upstream_h200.files):
#              mkdir -p shared/pt_up_a6a16cdc && git -C <Primus-Turbo clone> archive a6a16cdc \
#                $(cat benchmarks/pt_upstream_h200.files) | tar -x -C shared/pt_up_a6a16cdc
#   DEPS     a folder holding pydantic (and any of click, tabulate, rich, yaml missing),
#            e.g. /tmp/site after installing the carried .whl/ there
#   STATE    where the campaign state lives between calls: an ignored folder of this
#            checkout (default .ptu_state; name it in `carry` when the machine went cold)
#   SHARDS, SHARD_ID, MODEL_RE   which rows of upstream's benchmark are measured and
#            which of them are the campaign's targets (default: shard 0 of 30, Llama rows)
#   PASSES   the BASELINE's passes (default 4: two gave sigma_G 7.01% on an H100 at
#            928f034, a 21% threshold no single change of the kernel's config reaches)
# Each phase copies the state and a timing log under $OUT (when set) as well.
set -euo pipefail
REPO=$(pwd)
PY0=${PY:-python3}
PT_SRC=${PT_SRC:-shared/pt_up_a6a16cdc}
DEPS=${DEPS:-shared/deps}
STATE=${STATE:-.ptu_state}
BUDGET_S=${BUDGET_S:-240}
SHARDS=${SHARDS:-30}
SHARD_ID=${SHARD_ID:-0}
MODEL_RE=${MODEL_RE:-^Llama}
P=benchmarks/pt_upstream_h200
W=/tmp/ptu                        # every recorded path lies under it, call after call
export CAMPAIGN_ROOT=$W/campaigns
export TRITON_CACHE_DIR=/tmp/ptu_triton
t0=$SECONDS
case $STATE in /*) ;; *) STATE=$REPO/$STATE ;; esac
mkdir -p "$STATE"
log() { echo "[$(date -u +%H:%M:%S) +$((SECONDS - t0)) s] $*" | tee -a "$STATE/timings.log"; }
done_() { touch "$W/done.$1"; }
is_done() { [ -e "$W/done.$1" ]; }

save_state() {  # the state into the checkout (kept while the machine is warm); the
  # campaign folder's records and logs (its text files under 1 MiB) and the timing log
  # into $OUT (the whole state, about 90 MB, is over what comes back from a device)
  tar -czf "$STATE/state.tgz" -C "$W" .
  if [ -n "${OUT:-}" ] && [ -n "$(name 2>/dev/null)" ]; then
    cp "$STATE/timings.log" "$OUT/"
    (cd "$CAMPAIGN_ROOT/$(name)" && find . -type f -size -1024k \( -name '*.json' -o -name '*.jsonl' \
      -o -name '*.md' -o -name '*.log' -o -name '*.csv' -o -name '*.txt' -o -name '*.yaml' \) \
      | tar -czf "$OUT/campaign_text.tgz" -T -)
  fi
}

restore_state() {
  if [ ! -d "$W" ] && [ -f "$STATE/state.tgz" ]; then
    mkdir -p "$W" && tar -xzf "$STATE/state.tgz" -C "$W"
    log "state restored from $STATE/state.tgz"
  fi
  mkdir -p "$W"
}

make_venv() {  # over the system's torch/triton; workers start clean, so a .pth carries
  # this checkout and DEPS, and `python` on PATH (the commands') is this interpreter
  local v=/tmp/ptu_venv
  if [ ! -x "$v/bin/python" ]; then
    "$PY0" -m venv --system-site-packages "$v"
    local site
    site=$("$v/bin/python" -c "import site; print(site.getsitepackages()[0])")
    { printf '%s\n%s\n' "$REPO" "$(readlink -f "$DEPS")"
      "$PY0" -c "import site; print('\n'.join(site.getsitepackages()))"; } \
      > "$site/turbo_campaign_deps.pth"
  fi
  PY="$v/bin/python"
  export PATH="$v/bin:$PATH"
}
campaign() { "$PY" -m runner "$@"; }
name() { ls "$CAMPAIGN_ROOT" | grep -v '^workspaces$' | head -1; }

# upstream's rows in shard SHARD_ID of SHARDS, as bench_gemm_turbo.py enumerates them
# (config.py's models, its 5 GEMMs in gen_gemm_test_cases' order, get_batch_sizes for
# this GPU): TestID Case GEMM MBS M N K
shard_rows() {
  (cd "$W/Primus-Turbo/benchmark/ops/training" && "$PY" - "$SHARDS" "$SHARD_ID" <<'EOF'
import sys
from config import DenseModelConfigs, gen_gemm_test_cases, get_batch_sizes, get_platform_info
shards, shard = int(sys.argv[1]), int(sys.argv[2])
_, gpu = get_platform_info()
gemms = ("qkv", "attn_out", "gate_up", "down", "lm_head")  # upstream's order (a6a16cdc)
test_id = 0
for model, cfg in DenseModelConfigs.items():
    for mbs in get_batch_sizes(model, "fp8", gpu):
        for gemm, (m, n, k) in zip(gemms, gen_gemm_test_cases(cfg), strict=True):
            test_id += 1
            if (test_id - 1) % shards == shard:
                print(test_id, model, gemm, mbs, m * mbs, n, k)
EOF
  )
}

# EDIT HERE when init's shape options change: the campaign's targets, upstream's shape
# set's MODEL:GEMM:MBS selectors of the shard's rows whose model matches MODEL_RE.
init_shape_args() {
  local picked
  picked=$(awk -v re="$MODEL_RE" '$2 ~ re {printf "%s%s:%s:%s", sep, $2, $3, $4; sep=","}' \
    "$W/shard_rows.txt")
  [ -n "$picked" ] || { log "no row of shard $SHARD_ID of $SHARDS matches $MODEL_RE"; exit 6; }
  echo "--shape-set upstream --shapes $picked --no-heldout"
}

phase_setup() {
  "$PY" -c "import pydantic, click, yaml, pandas, tabulate, torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name(0))"
  rm -rf "$W/Primus-Turbo" && cp -r "$PT_SRC" "$W/Primus-Turbo"
  git -C "$W/Primus-Turbo" init -q && git -C "$W/Primus-Turbo" add -A
  git -C "$W/Primus-Turbo" -c user.name=lead -c user.email=lead@localhost \
    commit -qm "Primus-Turbo a6a16cdc (the files of $P.files)"
  shard_rows > "$W/shard_rows.txt"
  log "shard $SHARD_ID of $SHARDS (TestID Case GEMM MBS M N K):"; cat "$W/shard_rows.txt"
  local bench
  bench=$("$PY" -c "from runner.targets.primus_turbo import PRIMUS_TURBO as t; print(t.benchmark_command('gemm_fp8', 'blockwise', 'TRITON'))")
  bench="$bench --num-shards $SHARDS --shard-id $SHARD_ID"
  # the focused test narrowed to the Triton blockwise cases of one small shape, both
  # layouts of the forward op, so that a round's test takes a minute
  local test='PRIMUS_TURBO_GEMM_BACKEND=TRITON python -m pytest tests/pytorch/ops/test_gemm_fp8.py -q -x -k "test_gemm_fp8_blockwise and TRITON and False and E4M3 and 1024-1024-512"'
  # shellcheck disable=SC2046
  # accept's full suite: upstream's test file's Triton blockwise E4M3 cases (upstream's
  # `pytest tests/pytorch/ -v` runs every backend's cases, CK and hipBLASLt too, on CUDA)
  local suite='python -m pytest tests/pytorch/ops/test_gemm_fp8.py -q -k "test_gemm_fp8_blockwise and TRITON and E4M3 and False"'
  campaign init --target primus-turbo --source "$W/Primus-Turbo" --op gemm_fp8 \
    --granularity blockwise --backend triton --gpu sm90 --mode workspace --executor local \
    --test-command "$test" --benchmark-command "$bench" --suite-command "$suite" \
    $(init_shape_args)
  local ws="$CAMPAIGN_ROOT/workspaces/$(name)"
  log "init: $(name); platform layer and stand-ins:"
  sed -n '/^platform:/,/^[a-z_]*:$/p;/^stand_ins:/,/^[a-z]/p' "$ws/src/UPSTREAM.yaml"
  git -C "$W/Primus-Turbo" diff --quiet HEAD -- primus_turbo/triton/gemm/gemm_fp8_kernel.py
  cmp "$ws/src/primus_turbo/triton/gemm/gemm_fp8_kernel.py" \
    "$W/Primus-Turbo/primus_turbo/triton/gemm/gemm_fp8_kernel.py" && log "kernel byte-identical"
  smoke "$ws"
}

smoke() {  # upstream's op from the stack, forward (NT) then backward (NN grad_X, TN grad_W)
  (cd "$1" && PYTHONPATH="$1/src" PRIMUS_TURBO_GEMM_BACKEND=TRITON "$PY" - <<'EOF'
import sys, traceback
import torch
import primus_turbo.pytorch as turbo
from primus_turbo.pytorch.core import low_precision as lp
print("stack float8_e4m3 =", lp.float8_e4m3, "(the platform layer: OCP, gfx950's branch)")
cfg = lp.Float8QuantConfig(format=lp.Format.E4M3, granularity=lp.ScalingGranularity.BLOCKWISE, block_size=128)
a = torch.randn(512, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
b = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16, requires_grad=True)
try:
    out = turbo.ops.gemm_fp8(a, b, trans_b=True, config=cfg); torch.cuda.synchronize()
    out.backward(torch.randn_like(out)); torch.cuda.synchronize()
except Exception:
    traceback.print_exc(); print("STOPPED: record the upstream line above"); sys.exit(3)
print("forward and backward ok", tuple(out.shape))
EOF
  )
  log "smoke passed"
}

phase_statecheck() {  # what one training step of upstream's op writes into the state its
  # package keeps between calls (runner.worker.bench.statecheck's fingerprint, as the worker takes
  # it): three steps with fresh activations and the weight held still, three with it stepped
  local ws="$CAMPAIGN_ROOT/workspaces/$(name)"
  (cd "$ws" && PYTHONPATH="$ws/src" PRIMUS_TURBO_GEMM_BACKEND=TRITON "$PY" - <<'EOF'
import torch
import primus_turbo.pytorch as turbo
from primus_turbo.pytorch.core import low_precision as lp
from runner.worker.bench.statecheck import changed_paths, state_fingerprint, tensor_attributes
cfg = lp.Float8QuantConfig(format=lp.Format.E4M3, granularity=lp.ScalingGranularity.BLOCKWISE, block_size=128)
m, n, k = 4096, 12288, 4096
w = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
def state():
    return {**state_fingerprint("primus_turbo"), **tensor_attributes()}
for step in range(6):
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    before = state()
    out = turbo.ops.gemm_fp8(a, w, trans_b=True, config=cfg)
    torch.autograd.grad(out, (a, w), torch.randn_like(out))
    torch.cuda.synchronize()
    after = state()
    if step >= 3:
        with torch.no_grad():
            w.add_(torch.randn_like(w), alpha=1e-2)
    changed = changed_paths(before, after)
    print(f"step {step} ({'weight stepped after' if step >= 3 else 'weight still'}): "
          f"{len(changed)} of {len(after)} kept paths written")
    for path in changed[:12]:
        print("   ", path, str(before.get(path))[:90], "->", str(after.get(path))[:90])
EOF
  )
}

phase_autotunecost() {  # one training step's autotunes of upstream's op (Llama-2-7B qkv,
  # MBS 1) in fresh processes: "serial" compiles each config inside the timing loop as
  # Triton does, "timing" finds every kernel compiled on disk and only times the
  # configs, "threads" compiles each sweep's configs side by side first
  # (runner.worker.bench.autotune_compile); the platform layer times one of each config
  local ws="$CAMPAIGN_ROOT/workspaces/$(name)" mode dir
  for mode in ${ATC_MODES:-serial timing threads}; do
    dir="$W/atc-$mode"
    if [ "$mode" = timing ]; then
      dir="$W/atc-serial"; find "$dir" -name '*.autotune.json' -delete
    else
      rm -rf "$dir"
    fi
    (cd "$ws" && TRITON_CACHE_DIR="$dir" TRITON_CACHE_AUTOTUNING=1 PYTHONPATH="$ws/src" \
      PRIMUS_TURBO_GEMM_BACKEND=TRITON "$PY" - "$mode" <<'EOF'
import json, sys, time
import torch
import primus_turbo.pytorch as turbo
from primus_turbo.pytorch.core import low_precision as lp
from primus_turbo.triton.gemm import gemm_fp8_kernel as kernels
from runner.worker.bench import autotune_compile
mode = sys.argv[1]
if mode == "threads":
    import logging; logging.basicConfig(level=logging.INFO)
    assert autotune_compile.install() is None
cfg = lp.Float8QuantConfig(format=lp.Format.E4M3, granularity=lp.ScalingGranularity.BLOCKWISE, block_size=128)
a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
b = torch.randn(12288, 4096, device="cuda", dtype=torch.bfloat16, requires_grad=True)
torch.cuda.synchronize()
t0 = time.perf_counter()
out = turbo.ops.gemm_fp8(a, b, trans_b=True, config=cfg); torch.cuda.synchronize()
t1 = time.perf_counter()
out.backward(torch.randn_like(out)); torch.cuda.synchronize()
t2 = time.perf_counter()
sweeps = {}
for name in ("nt", "nn", "tn"):
    tuner = getattr(kernels, f"_blockwise_fp8_{name}_kernel")
    timed = getattr(tuner, "configs_timings", None) or {}
    sweeps[name] = {"listed": len(tuner.configs), "timed": len(timed),
                    "bench_s": round(getattr(tuner, "bench_time", float("nan")), 2)}
print(json.dumps({"mode": mode, "threads": autotune_compile.threads(), "forward_s": round(t1 - t0, 2),
                  "backward_s": round(t2 - t1, 2), "sweeps": sweeps}))
EOF
    ) | tail -1 | tee -a "$STATE/timings.log"
  done
}

phase_baseline() {
  campaign baseline --campaign "$(name)" --passes "${PASSES:-4}"
  log "baseline closed"; campaign status --campaign "$(name)"
}

validate() {  # round, hypothesis, patch file(s): the first that applies to the head
  local n=$1 hyp=$2 ws patch=""; shift 2
  ws="$CAMPAIGN_ROOT/workspaces/$(name)"
  # a phase run again after its round closed (a FAILED round) validates the next number
  while [ -e "$CAMPAIGN_ROOT/$(name)/rounds/round-$n/result.json" ]; do n=$((n + 1)); done
  for f in "$@"; do
    if git -C "$ws" apply --check "$REPO/$P/$f" 2>/dev/null; then patch="$REPO/$P/$f"; break; fi
  done
  [ -n "$patch" ] || { log "round $n: none of $* applies to the lineage head"; return 5; }
  log "round $n: $(basename "$patch")"
  local mark="$W/mark.round-$n"
  touch "$mark"
  campaign validate --campaign "$(name)" --round "$n" --hypothesis "$hyp" --patch "$patch" \
    || log "round $n: validate exit $?"
  campaign rounds --campaign "$(name)" | tail -3
  log "round $n closed; the Triton autotune results it wrote (seconds after the round's start, role folder):"
  autotune_writes "$mark" || log "no autotune result listed"
}

autotune_writes() {  # which role folder wrote each autotune result after the mark, when
  local t0
  t0=$(stat -c %Y "$1")
  find "$CAMPAIGN_ROOT/.jit-cache" -name '*.autotune.json' -newer "$1" -printf '%T@ %P\n' \
    | sort -n | awk -v t0="$t0" '{split($2, p, "/"); printf "  +%4d s %s\n", $1 - t0, p[1]}' \
    | uniq -c
}

phase_round2() {
  validate 2 "num_warps 8 for the 128-row tiles off AMD: on sm90 one warpgroup holds the 128x128 fp32 accumulator and the scaled partial product beside it in 255 registers a thread and spills (the round's kernel facts: 980 spill bytes forward); two warpgroups hold 64 + 64 registers a thread each" \
    round2_num_warps_8.patch
}
phase_round3() {
  validate 3 "num_stages 1 only on sm90: the autotune space without software pipelining, on the reasoning that the blockwise scales' loads dominate" \
    round3_num_stages_1.patch round3_num_stages_1.after_round2.patch
}
phase_round4() {
  validate 4 "fold B's blockwise scale into A's (one multiply per K block instead of two)" \
    round4_drop_b_scale.patch
  campaign isa --campaign "$(name)" --round 2 || log "isa exit $?"
  log "isa done"
}
phase_accept() {
  campaign accept --campaign "$(name)" || log "accept exit $?"
  log "accept closed"
}
phase_finish() {
  campaign report --campaign "$(name)" && log "report written"
  grep -n -A3 "Platform: non-AMD run" "$CAMPAIGN_ROOT/$(name)/report/final_report.md" || true
  campaign export --campaign "$(name)" --out "$W/$(name).bundle.tar.gz" && log "exported"
}
phase_reproduce() {  # on a second, fresh campaigns root, from a clone of the workspace
  # repository (the campaign's target: it holds the base commit the bundle replays onto)
  rm -rf "$W/reproduce" && mkdir -p "$W/reproduce/campaigns"
  git clone -q "$CAMPAIGN_ROOT/workspaces/$(name)" "$W/reproduce/source"
  CAMPAIGN_ROOT="$W/reproduce/campaigns" campaign reproduce "$W/$(name).bundle.tar.gz" \
    --source "$W/reproduce/source" --executor local --out "$W/reproduce/out" \
    || log "reproduce exit $?"
  log "reproduce closed"
}

PHASES=(setup baseline round2 round3 round4 accept finish reproduce)
restore_state
make_venv
cd "$REPO"
run_phase() {
  log "phase $1: start"
  "phase_$1"
  done_ "$1"
  log "phase $1: done"
  save_state
}
if [ $# -gt 0 ]; then
  run_phase "$1"
  exit 0
fi
for p in "${PHASES[@]}"; do
  is_done "$p" && continue
  if [ $((SECONDS - t0)) -ge "$BUDGET_S" ]; then
    log "stopping before phase $p (budget $BUDGET_S s used): call again"
    exit 0
  fi
  run_phase "$p"
done
log "ALL PHASES DONE: campaign folder $CAMPAIGN_ROOT/$(name) (in $STATE/state.tgz)"
