"""What one serving worker of a paired round keeps in device memory, stage by stage.

On one H200 (19e70b9, 2026-12-02, docs/data/history_paired_study_h200.md) the example's
blockwise-FP8 workers on the four Llama-2-7B mb1 shapes kept 11-15 GiB each between their turns,
with PyTorch's expandable segments and the cache emptied after every turn, while the
tensors Python can see (measured on the CPU) are the buffer pool, about 2.5 GiB, and
one case's float32 references.  So a tournament's wave holds one pair of five
workers.  This script finds where the rest is: it builds the worker's state
in-process (``runner.worker.bench.serve.Server``, the same prepare, blocks, fresh step and
finish as ``python -m runner.worker --serve``), and after each stage records the
allocator's figures, the bytes of the tensors Python can reach (by storage), and on a
GPU the largest live allocations with the Python frames that made them
(``torch.cuda.memory._record_memory_history`` / ``_snapshot``).

    # a GPU (the device's torch): the study's shapes, the quick round's turn timing
    PYTHONPATH=.:examples python3 benchmarks/worker_memory.py --out /tmp/worker_memory.json
    # the CPU, every dimension divided by 4
    PYTHONPATH=.:examples python3 benchmarks/worker_memory.py --device cpu --scale 4 \\
        --out /tmp/worker_memory_cpu.json
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

GIB = float(1 << 30)
STUDY_SHAPES = (  # label, M, N, K (benchmarks/paired_study.py's four shapes)
    ("Llama-2-7B-qkv-mb1-4096x12288x4096", 4096, 12288, 4096),
    ("Llama-2-7B-attn_out-mb1-4096x4096x4096", 4096, 4096, 4096),
    ("Llama-2-7B-gate_up-mb1-4096x22016x4096", 4096, 22016, 4096),
    ("Llama-2-7B-down-mb1-4096x4096x11008", 4096, 4096, 11008),
)


def python_tensors(torch: Any) -> dict[str, Any]:
    """The tensors Python can reach, counted once per storage."""
    gc.collect()
    seen: dict[int, tuple[int, str]] = {}
    for obj in gc.get_objects():
        try:
            if torch.is_tensor(obj) and obj.device.type != "meta":
                storage = obj.untyped_storage()
                seen[storage.data_ptr()] = (storage.nbytes(), f"{tuple(obj.shape)} {obj.dtype}")
        except Exception:  # objects that fail to answer are not tensors
            continue
    largest = sorted(seen.values(), reverse=True)[:8]
    return {
        "storages": len(seen),
        "gib": round(sum(n for n, _ in seen.values()) / GIB, 3),
        "largest": [[round(n / GIB, 3), what] for n, what in largest],
    }


def allocations(torch: Any) -> list[dict[str, Any]]:
    """On a GPU: the live allocations grouped by the innermost frames of this project
    (or the target) that made them, largest first."""
    snapshot = torch.cuda.memory._snapshot()
    by_site: Counter[str] = Counter()
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            if block.get("state") != "active_allocated":
                continue
            frames = [
                f
                for f in block.get("frames", [])
                if "/runner/" in f.get("filename", "") or "turbo_kernels" in f.get("filename", "")
            ]
            python = [f for f in block.get("frames", []) if f.get("filename", "").endswith(".py")]
            frames = frames or python
            site = (
                " < ".join(
                    f"{Path(f['filename']).name}:{f['line']} {f['name']}" for f in frames[:4]
                )
                or "(no Python frame)"
            )
            by_site[site] += int(block.get("size", 0))
    return [{"gib": round(n / GIB, 3), "site": s} for s, n in by_site.most_common(12)]


def pools(torch: Any) -> dict[str, Any]:
    """On a GPU: the reserved bytes per memory pool (the default pool, or a CUDA graph's
    private pool) and how many ``torch.cuda.CUDAGraph`` objects are still alive."""
    by_pool: Counter[str] = Counter()
    for segment in torch.cuda.memory._snapshot().get("segments", []):
        by_pool[str(tuple(segment.get("segment_pool_id", ())))] += int(segment.get("total_size", 0))
    graphs = sum(1 for obj in gc.get_objects() if isinstance(obj, torch.cuda.CUDAGraph))
    return {
        "graphs_alive": graphs,
        "pools": len(by_pool),
        "gib_by_pool": {k: round(v / GIB, 3) for k, v in by_pool.most_common(6)},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--scale", type=int, default=1, help="divide every dimension by this")
    parser.add_argument(
        "--pool",
        type=int,
        default=2,
        help="buffer pool members (a quick round's two-turn worker holds 2)",
    )
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import torch

    from runner.core.shapes import Shape
    from runner.core.spec import RoundSpec, TimingSettings
    from runner.measure.paired import block_timing
    from runner.targets.registry import get_target
    from runner.worker.bench.serve import Server
    from runner.worker.ops.base import load_adapter

    gpu = args.device != "cpu"
    if gpu:
        torch.cuda.memory._record_memory_history(max_entries=200_000)
    shapes = tuple(
        Shape(label, m // args.scale, n // args.scale, k // args.scale)
        for label, m, n, k in STUDY_SHAPES
    )
    options = {"granularity": "blockwise", "backend": "TRITON" if gpu else "TORCH"}
    timing = block_timing(TimingSettings(), 2, short=gpu)
    spec = RoundSpec(
        "worker-memory",
        2,
        "incumbent",
        1,
        "quick",
        "example",
        "gemm_fp8",
        options,
        shapes,
        timing,
        device=args.device,
        pool=args.pool,
    )
    adapter = load_adapter(spec.op, get_target("example").load_api(), spec.options)
    out_dir = args.out.parent / "worker-memory-pass"
    out_dir.mkdir(parents=True, exist_ok=True)
    server = Server(spec, out_dir, adapter, args.device)
    stages: list[dict[str, Any]] = []

    def stage(name: str, seconds: float) -> None:
        record: dict[str, Any] = {"stage": name, "seconds": round(seconds, 2)}
        if gpu:  # first as the serving worker reports it: no garbage collection
            torch.cuda.synchronize()
            record["allocated_gib"] = round(torch.cuda.memory_allocated() / GIB, 3)
            record["reserved_gib"] = round(torch.cuda.memory_reserved() / GIB, 3)
            record["peak_reserved_gib"] = round(torch.cuda.max_memory_reserved() / GIB, 3)
            torch.cuda.empty_cache()
            record["held_gib"] = round(torch.cuda.memory_reserved() / GIB, 3)
            stats = torch.cuda.memory_stats()
            record["segments"] = stats.get("segment.all.current")
            record["inactive_split_gib"] = round(
                stats.get("inactive_split_bytes.all.current", 0) / GIB, 3
            )
            record["sites"] = allocations(torch)
            record.update(pools(torch))
        record["python"] = python_tensors(torch)  # collects garbage first
        if gpu:
            torch.cuda.empty_cache()
            record["after_gc_allocated_gib"] = round(torch.cuda.memory_allocated() / GIB, 3)
            record["after_gc_held_gib"] = round(torch.cuda.memory_reserved() / GIB, 3)
            torch.cuda.reset_peak_memory_stats()
        stages.append(record)
        brief = {k: v for k, v in record.items() if k not in ("sites", "python", "gib_by_pool")}
        print(json.dumps(brief), flush=True)

    for name, work in (
        ("prepare", server.prepare),
        ("block 0", lambda: server.block(0)),
        ("block 1", lambda: server.block(1)),
        ("fresh", server.fresh),
        ("finish", server.finish),
    ):
        t0 = time.perf_counter()
        work()
        stage(name, time.perf_counter() - t0)
    args.out.write_text(
        json.dumps(
            {"device": args.device, "scale": args.scale, "pool": args.pool, "stages": stages},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
