"""docs/reliability.md §8, the process-tree clock guard: the CPU engine times the worker's own
CPU time, which does not count other processes, so an op that forks a helper to do the
GEMM and blocks on a pipe looked nearly free.  Every timed batch is now read against
the process tree: children alive or busy, other threads busy, or the timing thread
blocked, fail the shape, named.  The cheat is planted as the target's ``gemm`` and run
through one real worker shape on the CPU; the rules are also tried one by one."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import types
from array import array
from collections.abc import Iterator
from typing import Any

import pytest
import torch

from runner.core.shapes import Shape
from runner.core.spec import RoundSpec, TimingSettings
from runner.worker.bench.proctree import ClockBlind, TreeGuard
from runner.worker.bench.timing import measure_cpu
from runner.worker.bench.worker_pass import measure_shape
from runner.worker.ops.gemm import GemmOp

SHAPE = Shape("tiny-8x8x16", m=8, n=8, k=16)
TIMING = TimingSettings(warmup_s=0.01, repeats=3, max_repeats=3, batch_s=0.03, budget_s=0.3)
# The worker shape's batches: about 0.3 s of timed work, so the helper's share is far
# above the guard's 50 ms floor (with TIMING's 0.09 s it sat on the floor, 0.050 s).
SHAPE_TIMING = TimingSettings(warmup_s=0.01, repeats=3, max_repeats=3, batch_s=0.1, budget_s=1.0)
# The helper: reads (m, n, k, a, b) as float32 from stdin, writes a @ b^T back.
HELPER = """
import sys
from array import array
src, dst = sys.stdin.buffer, sys.stdout.buffer
while True:
    head = src.read(12)
    if len(head) < 12:
        break
    m, n, k = array("i", head)
    a, b = array("f"), array("f")
    a.frombytes(src.read(4 * m * k)); b.frombytes(src.read(4 * n * k))
    dot = lambda i, r: sum(a[i * k + j] * b[r * k + j] for j in range(k))
    out = array("f", (dot(i, r) for i in range(m) for r in range(n)))
    dst.write(out.tobytes()); dst.flush()
"""


@pytest.fixture
def pinned() -> Iterator[None]:
    """One intra-op thread, as the worker runs CPU passes (``pin_cpu_threads``)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture
def forked_gemm() -> Iterator[Any]:
    """The planted cheat: the GEMM done by a helper process, the op blocked on its pipe."""
    helper = subprocess.Popen(
        [sys.executable, "-I", "-c", HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert helper.stdin is not None and helper.stdout is not None
    pipe_in, pipe_out = helper.stdin, helper.stdout

    def product(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        m, n, k = x.shape[0], y.shape[0], x.shape[1]
        pipe_in.write(array("i", (m, n, k)).tobytes())
        for t in (x, y):
            pipe_in.write(array("f", t.detach().float().flatten().tolist()).tobytes())
        pipe_in.flush()
        got = array("f")
        got.frombytes(pipe_out.read(4 * m * n))
        return torch.tensor(got.tolist()).reshape(m, n).to(x.dtype)

    class Forked(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            ctx.save_for_backward(a, b)
            return product(a, b)

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> Any:
            a, b = ctx.saved_tensors
            return g @ b, g.t() @ a

    def gemm(a: torch.Tensor, b: torch.Tensor, trans_b: bool = True) -> torch.Tensor:
        out: torch.Tensor = Forked.apply(a, b)
        return out

    yield gemm
    pipe_in.close()
    helper.wait(timeout=10)
    pipe_out.close()


def test_the_planted_cheat_is_right(forked_gemm: Any) -> None:
    a, b = torch.randn(3, 5), torch.randn(4, 5)
    assert torch.allclose(forked_gemm(a, b), a @ b.t(), atol=1e-4)


def test_a_gemm_done_by_a_helper_process_fails_the_shape_named(
    forked_gemm: Any, pinned: None
) -> None:
    adapter = GemmOp(types.SimpleNamespace(ops=types.SimpleNamespace(gemm=forked_gemm)), {})
    spec = RoundSpec(
        "t46",
        1,
        "candidate",
        0,
        "quick",
        "example",
        "gemm",
        {},
        (SHAPE,),
        SHAPE_TIMING,
        device="cpu",
    )
    # forked at its first call, before the first timed batch: seen by its CPU time or
    # by the timing thread waiting for it
    with pytest.raises(ClockBlind, match="process-tree clock guard: "):
        measure_shape(adapter, SHAPE, spec, "cpu")


def test_an_honest_op_in_the_timing_thread_passes(pinned: None) -> None:
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    measure_cpu(lambda: a @ b, TIMING)  # raises ClockBlind on a false flag
    guard = TreeGuard()
    guard.start()
    end = time.perf_counter() + 0.2
    while time.perf_counter() < end:  # plain CPU work, however loaded the machine
        a @ b
    guard.stop()
    assert guard.problems() == []


def test_a_child_burning_cpu_while_the_worker_waits_is_seen(pinned: None) -> None:
    guard = TreeGuard()
    guard.start()
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    subprocess.run([sys.executable, "-I", "-c", busy], check=True)
    guard.stop()
    found = " ".join(guard.problems())
    assert "child processes used" in found and "blocked" in found, found
    with pytest.raises(ClockBlind, match="process-tree clock guard"):
        guard.check()


def test_a_thread_doing_the_work_while_the_worker_waits_is_seen(pinned: None) -> None:
    def work() -> None:
        end = time.thread_time() + 0.3
        while time.thread_time() < end:
            pass

    guard = TreeGuard()
    guard.start()
    helper = threading.Thread(target=work)
    helper.start()
    helper.join()
    guard.stop()
    found = " ".join(guard.problems())
    assert "threads other than the timing thread" in found and "blocked" in found, found


def test_a_daemon_helper_outside_the_tree_shows_as_a_blocked_timing_thread(pinned: None) -> None:
    """A helper reparented away (its parent exited) is no child of the worker and its
    CPU time is no descendant's: the timing thread blocked on its pipe still shows."""
    busy = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"
    spawn = f"import subprocess, sys\nsubprocess.Popen([sys.executable, '-I', '-c', {busy!r}])"
    parent = subprocess.Popen([sys.executable, "-I", "-c", spawn], stdout=subprocess.PIPE)
    parent.wait(timeout=10)  # the grandchild holds the pipe open until it is done
    guard = TreeGuard()
    guard.start()
    assert parent.stdout is not None
    parent.stdout.read()  # blocked until the daemon ends
    guard.stop()
    parent.stdout.close()
    assert guard.children_cpu < 0.1 and not guard.alive
    assert any("blocked" in p for p in guard.problems()), guard.problems()
