"""Kernel facts of Primus-Turbo's blockwise FP8 GEMM on a CPU machine (docs/benchmarks.md).

``python benchmarks/primus_turbo_facts.py --source PT --replace OLD NEW [--arch gfx942
--arch gfx950] [--cache DIR]`` makes a git repository of the checkout ``PT`` (its Python files),
a primus-turbo campaign on it (gemm_fp8 blockwise, TRITON, the GEMM and the blockwise
quantisation files as its kernel source), and, for each arch, the round facts of both
roles (incumbent = the checkout, candidate = it with every ``OLD`` of the GEMM file
replaced by ``NEW``, e.g. ``"num_stages=ns," "num_stages=ns + 1,"``: the change, made
here so that no upstream line is stored in this repository) as a VALIDATE
round takes them (``runner.round.kernel_facts.round_facts``).  Prints each arch's seconds
(wall and CPU: the machine may be shared) and the summary's facts section; ``--cache``
keeps the facts cache (a second run is the warm one).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELS = [
    "primus_turbo/triton/gemm/gemm_fp8_kernel.py",
    "primus_turbo/triton/quantization/quant_blockwise.py",
]
GIT = ["git", "-c", "user.name=bench", "-c", "user.email=bench@localhost"]


def _repo(source: Path, dest: Path) -> None:
    for path in source.rglob("*.py"):
        rel = path.relative_to(source)
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, dest / rel)
    subprocess.run([*GIT, "init", "-q", str(dest)], check=True)
    subprocess.run([*GIT, "-C", str(dest), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(dest), "commit", "-qm", "checkout"], check=True)


def _cpu_s() -> float:
    """User + system seconds of this process and of its finished children."""
    me, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", required=True, type=Path)
    ap.add_argument("--replace", nargs=2, required=True, metavar=("OLD", "NEW"))
    ap.add_argument("--arch", action="append", default=[])
    ap.add_argument("--cache", type=Path, default=None)
    ns = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        cache = ns.cache or root / "cache"
        os.environ["TURBO_CAMPAIGN_FACTS_CACHE"] = str(cache)
        from runner.flow.new_campaign import CampaignFields, create_campaign
        from runner.render.kernel_facts import facts_markdown
        from runner.round.kernel_facts import round_facts

        inc, cand = root / "incumbent", root / "candidate"
        _repo(ns.source, inc)
        shutil.copytree(inc, cand)
        gemm = cand / KERNELS[0]
        text = gemm.read_text(encoding="utf-8")
        old, new = ns.replace
        if old not in text:
            sys.exit(f"{old!r} is not in {KERNELS[0]}")
        gemm.write_text(text.replace(old, new), encoding="utf-8")
        print(f"candidate: {text.count(old)} x {old!r} -> {new!r} in {KERNELS[0]}")
        for arch in ns.arch or ["gfx942", "gfx950"]:
            campaign = create_campaign(
                root / "campaigns" / arch,
                CampaignFields(
                    target="primus-turbo",
                    executor="local",
                    source=str(inc),
                    target_op="gemm_fp8",
                    granularity="blockwise",
                    target_backend="TRITON",
                    target_gpu=arch,
                    campaign_name=f"facts-{arch}",
                    kernel_source=list(KERNELS),
                ),
            )
            started, cpu = time.monotonic(), _cpu_s()
            facts = round_facts(campaign, {"incumbent": inc, "candidate": cand})
            took, cpu = time.monotonic() - started, _cpu_s() - cpu
            load = os.getloadavg()[0]
            print(
                f"## {arch}: {took:.1f} s wall, {cpu:.1f} s CPU (this process and its "
                f"compiles), load average {load:.1f}\n\n{facts_markdown(facts)}\n",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
