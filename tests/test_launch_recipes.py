"""Launch recipes for Primus-Turbo's own kernels (docs/analysis.md §1): a round's kernel
facts compile upstream's Triton kernels at the configs upstream's code picks.

The checkout here is laid out like Primus-Turbo at a6a16cdc (the paths of
``tests/data/primus_turbo_paths.txt``, empty) with the modules the blockwise FP8 GEMM
recipe calls written here (small kernels of our own, no upstream code) the way upstream
builds them: a package ``__init__`` that loads the compiled extension, a quantiser module
that imports an uninstalled DSL, an autotune config list chosen by ``is_gfx950()`` at
import, constexprs passed by keyword, AMD knobs set only for the launch's scope.  One
real compile per role and kernel file (gfx942 and gfx950, Triton 3.6).  With
``TURBO_CAMPAIGN_PRIMUS_TURBO_SRC`` naming a real checkout (a6a16cdc), the last test does
the same on upstream's own files (a few minutes on two cores).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import test_primus_turbo_facts as ptf

from runner.core.isa_facts import KernelEntry, KernelFacts
from runner.flow.new_campaign import CampaignFields, create_campaign
from runner.round.kernel_facts import round_facts, triton_version
from runner.store.campaign import Campaign

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(triton_version() is None, reason="needs torch and triton"),
]

GEMM = "primus_turbo/triton/gemm/gemm_fp8_kernel.py"
QUANT = "primus_turbo/triton/quantization/quant_blockwise.py"
SITE = "primus_turbo/pytorch/ops/quantization.py"  # a launch site outside the kernel folders
UNIFIED = "_unified_kernel"

FILES = {
    "primus_turbo/__init__.py": "import primus_turbo.pytorch._C  # the compiled extension\n",
    "primus_turbo/pytorch/__init__.py": "from primus_turbo.pytorch import _C  # noqa\n",
    "primus_turbo/pytorch/core/utils.py": """\
import torch


def is_gfx950():
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    return (p.major, p.minor) == (9, 5)
""",
    "primus_turbo/pytorch/core/low_precision.py": """\
import enum
from dataclasses import dataclass

import torch

from primus_turbo.pytorch.core.utils import is_gfx950

float8_e4m3 = torch.float8_e4m3fn if is_gfx950() else torch.float8_e4m3fnuz


class ScalingGranularity(enum.Enum):
    BLOCKWISE = "blockwise"


@dataclass
class ScalingRecipe:
    use_2d_block: bool = False
""",
    SITE: """\
import torch
from flydsl.expr import arith  # noqa: F401  (not installed: stood in for)

from primus_turbo.triton.quantization.quant_blockwise import quant_kernel


def _quant(x, dtype, block_size):
    y = torch.empty(x.shape, dtype=dtype)
    s = torch.empty(x.shape[0], dtype=torch.float32)
    quant_kernel[(1,)](x, y, s, x.numel(), BLOCK=block_size)
    return y, s


def quantize_fp8_with_trans(x, dtype, granularity, block_size=128):
    return (*_quant(x, dtype, block_size), *_quant(x, dtype, block_size))


def quantize_fp8(x, dtype, granularity, block_size=128, scaling_recipe=None):
    return _quant(x, dtype, block_size)
""",
    QUANT: """\
import triton
import triton.language as tl


@triton.jit
def quant_kernel(x, y, s, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x + offs, mask=offs < n, other=0.0).to(tl.float32)
    tl.store(y + offs, v.to(y.dtype.element_ty), mask=offs < n)
    tl.store(s + tl.program_id(0), tl.max(tl.abs(v), 0))
""",
    GEMM: """\
import contextlib

import torch
import triton
import triton.language as tl

from primus_turbo.pytorch.core.utils import is_gfx950


def _configs():
    stages = [1, 2, 3] if is_gfx950() else [1, 2]
    blocks_n = [64, 128] if is_gfx950() else [128]
    return [triton.Config({"BLOCK_N": bn}, num_warps=4, num_stages=ns)
            for bn in blocks_n for ns in stages]


@triton.jit
def _unified_kernel(a, out, n_k, BLOCK_N: tl.constexpr, K_CONTIGUOUS: tl.constexpr):
    offs = tl.arange(0, BLOCK_N)
    acc = tl.zeros((BLOCK_N,), dtype=tl.float32)
    for k in range(n_k):
        step = BLOCK_N if K_CONTIGUOUS else 2 * BLOCK_N
        acc += tl.load(a + k * step + offs).to(tl.float32)
    tl.store(out + offs, acc.to(out.dtype.element_ty))


_nt = triton.autotune(configs=_configs(), key=["n_k"])(_unified_kernel)


@contextlib.contextmanager
def _knobs(on):
    saved = triton.knobs.amd.use_async_copy
    triton.knobs.amd.use_async_copy = on
    try:
        yield
    finally:
        triton.knobs.amd.use_async_copy = saved


def gemm_fp8_blockwise_triton_kernel(a, a_s, b, b_s, trans_a=False, trans_b=True,
                                     out_dtype=torch.bfloat16, trans_c=False):
    out = torch.empty(256, dtype=out_dtype)
    with _knobs(not trans_a):
        _nt[(1,)](a, out, 8, K_CONTIGUOUS=not trans_a)
    return out
""",
}


def _fake_upstream(path: Path) -> Path:
    ptf.make_checkout(path)
    for rel, text in FILES.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text, encoding="utf-8")
    _commit(path, "the blockwise FP8 GEMM's modules")
    return path


def _commit(path: Path, message: str) -> None:
    subprocess.run(["git", "-C", str(path), "add", "-A"], check=True)
    subprocess.run(["git", "-C", str(path), *ptf.IDENT, "commit", "-qm", message], check=True)


def _campaign(root: Path, source: Path, arch: str) -> Campaign:
    return create_campaign(
        root,
        CampaignFields(
            target="primus-turbo",
            executor="local",
            source=str(source),
            target_op="gemm_fp8",
            granularity="blockwise",
            target_backend="TRITON",
            target_gpu=arch,
            campaign_name=f"facts-{arch}",
            kernel_source=[GEMM, QUANT],
        ),
    )


def _changed(source: Path, dest: Path, rel: str, old: str, new: str) -> Path:
    shutil.copytree(source, dest)
    text = (dest / rel).read_text(encoding="utf-8")
    assert old in text, f"{rel} lacks {old!r}"
    (dest / rel).write_text(text.replace(old, new), encoding="utf-8")
    return dest


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _fake_upstream(tmp_path_factory.mktemp("pt") / "Primus-Turbo")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURBO_CAMPAIGN_FACTS_CACHE", str(tmp_path / "facts-cache"))


def _unified(facts: KernelFacts, role: str, step: str) -> KernelEntry:
    return facts.roles[role][f"{UNIFIED} [{step}]"]


def test_a_num_stages_change_in_the_autotune_list_moves_both_archs_facts(
    fake: Path, tmp_path: Path
) -> None:
    cand = _changed(fake, tmp_path / "cand", GEMM, "num_stages=ns)", "num_stages=ns + 1)")
    seen = {}
    for arch in ("gfx942", "gfx950"):
        campaign = _campaign(tmp_path / arch, fake, arch)
        facts = round_facts(campaign, {"incumbent": fake, "candidate": cand})
        assert facts.arch == arch and "no kernel facts" not in (facts.note or ""), facts
        inc, new = (_unified(facts, role, "forward: NT") for role in ("incumbent", "candidate"))
        # the first config of the list is_gfx950() built at import, keyword constexprs kept
        assert (inc.config["num_stages"], new.config["num_stages"]) == (1, 2)
        assert inc.config["K_CONTIGUOUS"] is True and inc.config["num_warps"] == 4
        assert (
            inc.autotune == f"config 1 of the {2 if arch == 'gfx942' else 6} of its autotune list"
        )
        assert (
            inc.knobs is not None and inc.knobs["use_async_copy"] is True
        )  # set by the wrapper for its launch only
        assert inc.file == GEMM and (inc.facts["vgpr"] or 0) > 0
        # the NN launch is the NT one (same specialisation and knobs): compiled once
        tn = _unified(facts, "candidate", "backward: grad_b TN")
        assert len([k for k in facts.roles["candidate"] if k.startswith(UNIFIED)]) == 2
        assert tn.config["K_CONTIGUOUS"] is False and (tn.knobs or {})["use_async_copy"] is False
        quant = facts.roles["candidate"]["quant_kernel"]
        assert quant.file == QUANT and quant.config["BLOCK"] == 128
        assert facts.note and "stood in for flydsl" in facts.note and "_C" not in facts.note
        seen[arch] = inc.config["BLOCK_N"]
    assert seen == {"gfx942": 128, "gfx950": 64}  # each arch's own branch of the list


def test_a_launch_site_outside_the_kernel_folder_is_a_dependency(
    fake: Path, tmp_path: Path
) -> None:
    campaign = _campaign(tmp_path / "c", fake, "gfx942")
    before = round_facts(campaign, {"incumbent": fake})
    site = _changed(fake, tmp_path / "site", SITE, "BLOCK=block_size", "BLOCK=block_size // 2")
    after = round_facts(campaign, {"incumbent": site})
    old, new = (f.roles["incumbent"]["quant_kernel"].config for f in (before, after))
    assert (old["BLOCK"], new["BLOCK"]) == (128, 64)  # not the cached compile of the old site


def test_an_op_without_a_recipe_is_named(fake: Path, tmp_path: Path) -> None:
    campaign = create_campaign(
        tmp_path,
        CampaignFields(
            target="primus-turbo",
            executor="local",
            source=str(fake),
            target_op="gemm_fp8",
            granularity="rowwise",
            target_backend="TRITON",
            target_gpu="gfx942",
            kernel_source=[GEMM],
        ),
    )
    facts = round_facts(campaign, {"incumbent": fake})
    note = facts.note or ""
    assert note.startswith("no kernel facts: no launch recipe for gemm_fp8 rowwise")
    assert "gemm_fp8 blockwise" in note


UPSTREAM = os.environ.get("TURBO_CAMPAIGN_PRIMUS_TURBO_SRC")
UPSTREAM_GEMM = "primus_turbo/triton/gemm/gemm_fp8_kernel.py"


@pytest.mark.skipif(not UPSTREAM, reason="TURBO_CAMPAIGN_PRIMUS_TURBO_SRC names no checkout")
def test_upstream_blockwise_gemm_facts_for_both_archs(tmp_path: Path) -> None:
    inc = tmp_path / "inc"
    shutil.copytree(str(UPSTREAM), inc, ignore=shutil.ignore_patterns(".git"))
    subprocess.run(["git", "init", "-q", str(inc)], check=True)
    _commit(inc, "upstream checkout")
    cand = _changed(inc, tmp_path / "cand", UPSTREAM_GEMM, "num_stages=ns,", "num_stages=ns + 1,")
    for arch in ("gfx942", "gfx950"):
        facts = round_facts(
            _campaign(tmp_path / arch, inc, arch), {"incumbent": inc, "candidate": cand}
        )
        gemms = [k for k in facts.roles["candidate"] if k.startswith("_blockwise_fp8_unified")]
        assert len(gemms) == 3, facts  # forward NT, backward NN and TN
        for name in gemms:
            old, new = (facts.roles[r][name].config for r in ("incumbent", "candidate"))
            assert (old["num_stages"], new["num_stages"]) == (1, 2)
        quants = {k.split(" ")[0] for k in facts.roles["candidate"] if k.startswith("quant_")}
        assert quants == {
            "quant_fp8_blockwise_dual_kernel",
            "quant_fp8_blockwise_for_weight_kernel",
        }
