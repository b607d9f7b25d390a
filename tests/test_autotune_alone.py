"""A worker's Triton autotunes, on a real GPU:

* alone on the device (runner.worker.bench.autotune_alone), in two real worker-like
  processes that share one role's autotune results: only one of them times the configs,
  under the exclusive hold, having compiled them before it took the hold, the other
  reads the first one's result;
* each sweep's configs compiled side by side before the first is timed
  (runner.worker.bench.autotune_compile): each config's kernel compiled once, on the
  pool's threads, and the sweep still runs a config that computes the right result.

Skipped where torch sees no GPU or Triton is missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import runner

torch = pytest.importorskip("torch")
pytest.importorskip("triton")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU visible to torch"),
]

ROOT = str(Path(runner.__file__).resolve().parent.parent)
# An autotuned Triton kernel of four configs.
KERNEL = """
import json, sys, threading
import torch, triton, triton.compiler, triton.language as tl

configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]

@triton.autotune(configs=configs, key=["n"])
@triton.jit
def scale(x, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) * 2.0, mask=i < n)
"""
# One shape's preparation: the kernel's first call under a shared hold, hooked as a
# serving worker hooks it; each compile recorded with the exclusive holds taken so far.
PREPARE = (
    KERNEL
    + """
from runner.core.prepare_lock import DeviceLock
from runner.worker.bench import autotune_alone, autotune_compile

unhooked = autotune_alone.install() or autotune_compile.install()
lock = DeviceLock(sys.argv[1])
holds_at_compile = []
compile = triton.compiler.compile
def recorded(*args, **kwargs):
    holds_at_compile.append(lock.alone)
    return compile(*args, **kwargs)
triton.compiler.compile = recorded
x = torch.randn(1 << 20, device="cuda")
out = torch.empty_like(x)
with lock, autotune_alone.holding(lock), lock.shared():
    scale[lambda m: (triton.cdiv(x.numel(), m["BLOCK"]),)](x, out, x.numel())
    torch.cuda.synchronize()
timed = hasattr(scale, "bench_time")  # set only when this process timed the configs
print(json.dumps({"unhooked": unhooked, "alone": lock.alone, "timed": timed,
                  "holds_at_compile": holds_at_compile}))
"""
)
# Two sweeps, each config's compile recorded with the thread it ran on.
SWEEP = (
    KERNEL
    + """
from runner.worker.bench import autotune_compile

threads = []
compile = triton.compiler.compile
def recorded(*args, **kwargs):
    threads.append(threading.current_thread().name)
    return compile(*args, **kwargs)
triton.compiler.compile = recorded  # where a JITFunction takes it on its first launch

unhooked = autotune_compile.install()
for n in (1 << 20, 1 << 19):  # a second sweep: the same kernels, nothing compiled again
    x = torch.randn(n, device="cuda")
    out = torch.empty_like(x)
    scale[lambda m: (triton.cdiv(n, m["BLOCK"]),)](x, out, n)
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2.0)
print(json.dumps({"unhooked": unhooked, "threads": threads}))
"""
)


def test_two_workers_of_a_role_autotune_once_each_alone(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "PYTHONPATH": ROOT,
        "TRITON_CACHE_AUTOTUNING": "1",
        "TRITON_CACHE_DIR": str(tmp_path / "triton"),  # one role's folder, shared
    }
    lock = str(tmp_path / "gpu-0.lock")
    script = tmp_path / "prepare.py"  # Triton reads a jitted function's source file
    script.write_text(PREPARE, encoding="utf-8")
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), lock], env=env, text=True, stdout=subprocess.PIPE
        )
        for _ in range(2)
    ]
    results = [json.loads(p.communicate(timeout=300)[0].strip().splitlines()[-1]) for p in procs]
    assert [p.returncode for p in procs] == [0, 0]
    assert [r["unhooked"] for r in results] == [None, None]
    # the nested per-config holds not counted; a worker that finds the other's result
    # already kept reads it without the hold
    assert sorted(r["alone"] for r in results) in ([0, 1], [1, 1])
    assert sorted(r["timed"] for r in results) == [False, True]
    # the one that timed compiled every config before it held the device alone
    timer = next(r for r in results if r["timed"])
    assert timer["holds_at_compile"] == [0, 0, 0, 0], timer


def test_a_sweep_compiles_every_config_once_on_the_pool(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": ROOT, "TRITON_CACHE_DIR": str(tmp_path / "triton")}
    script = tmp_path / "sweep.py"  # Triton reads a jitted function's source file
    script.write_text(SWEEP, encoding="utf-8")
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, text=True, capture_output=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["unhooked"] is None
    assert len(result["threads"]) == 4  # one compile per config, none in the timing loop
    assert all(name.startswith("compile") for name in result["threads"]), result
