"""Every config of an autotune sweep compiled side by side before the first is timed
(runner.worker.bench.autotune_compile), in a real process on a real GPU: each config's
kernel is compiled once, on the pool's threads, and the sweep still picks and runs a
config that computes the right result.  Skipped where torch sees no GPU or Triton is
missing."""

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
SWEEP = """
import json, threading
import torch, triton, triton.compiler, triton.language as tl
from runner.worker.bench import autotune_compile

configs = [triton.Config({"BLOCK": b}, num_warps=w) for b in (256, 1024) for w in (2, 4)]

@triton.autotune(configs=configs, key=["n"])
@triton.jit
def scale(x, out, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out + i, tl.load(x + i, mask=i < n) * 2.0, mask=i < n)

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
