"""Kernel facts (docs/analysis.md): both roles' Triton kernels compiled ahead of time for
gfx942 in every round, side by side in the round's records, with warnings.

One real round (module fixture) on a copy of the session's ``slow_tiny`` campaign: its
candidate plants 256 x 512 tiles in the example's FP8 GEMM config, which needs 98 KiB of
LDS on gfx942 (64 KiB): summary.md, ``campaign show``, the MCP answer and the report flag
it, ``campaign isa`` diffs it.  The compiles (two, a few seconds each) run beside the
round's measurement.  The parsers are tested on small texts written here in the format
Triton 3.6.0's AMDGCN and ptxas print.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from campaign_helpers import MANIFEST, manifest, run_cli

from runner.core.errors import ConfigError
from runner.core.files import write_json_atomic
from runner.core.isa_facts import KernelEntry, KernelFacts, parse_amdgcn, parse_ptx, warnings
from runner.core.outcomes import RoundResult, Status
from runner.executors.factory import make_executor
from runner.executors.isolation import isolation_works
from runner.flow.validate import Request, validate_round
from runner.render.analysis_status import analysis_lines
from runner.round.kernel_facts import facts_arch, triton_version
from runner.store.campaign import Campaign

KERNEL = "turbo_kernels/triton/gemm_fp8_kernel.py"
NAME = "_gemm_fp8_blockwise_kernel"
TILES = '    "BLOCK_M": 128,\n    "BLOCK_N": 128,\n'
BIG_TILES = '    "BLOCK_M": 256,\n    "BLOCK_N": 512,\n'

needs_triton = pytest.mark.skipif(triton_version() is None, reason="needs torch and triton")


def _planted_patch(source: Path) -> str:
    path = source / KERNEL
    text = path.read_text(encoding="utf-8")
    assert text.count(TILES) == 1, f"{KERNEL}'s GEMM_CONFIG no longer starts with {TILES!r}"
    path.write_text(text.replace(TILES, BIG_TILES), encoding="utf-8")
    diff = subprocess.run(["git", "diff"], cwd=source, capture_output=True, text=True, check=True)
    subprocess.run(["git", "checkout", "-q", "--", KERNEL], cwd=source, check=True)
    return diff.stdout


@pytest.fixture(scope="module")
def planted(
    slow_tiny: Path,
    tmp_path_factory: pytest.TempPathFactory,
    copy_campaign: Callable[[Path, Path, str], Path],
) -> tuple[Campaign, RoundResult]:
    if triton_version() is None:
        pytest.skip("needs torch and triton")
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path_factory.mktemp("facts") / "c", "t"))
    patch = _planted_patch(Path(campaign.manifest.source))
    request = Request(2, "256 x 512 tiles load more per K step", patch, allow_outside=(KERNEL,))
    result = validate_round(
        campaign, make_executor(campaign.manifest), request, progress=lambda _m: None
    )
    return Campaign.load(campaign.root), result


@needs_triton
def test_a_planted_lds_overflow_is_flagged_in_the_round_summary(
    planted: tuple[Campaign, RoundResult],
) -> None:
    campaign, result = planted
    facts = result.kernel_facts
    assert facts is not None and facts.arch == "gfx942" and facts.triton
    inc, cand = (facts.roles[role][NAME] for role in ("incumbent", "candidate"))
    assert inc.config["BLOCK_M"] == 128 and cand.config["BLOCK_M"] == 256
    old, new = inc.facts["shared_bytes"], cand.facts["shared_bytes"]
    assert old is not None and new is not None and old <= 65536 < new
    summary = campaign.summary_path(2).read_text(encoding="utf-8")
    assert "## Kernel facts" in summary and "gfx942" in summary
    assert f"WARNING {NAME}: over the LDS limit" in summary
    assert f"WARNING {NAME}: new spills: vgpr_spill 0 -> " in summary
    row = f"| LDS / shared bytes | {old} | {new}"
    assert row in summary
    # the record of the (rolled-back or accepted) round carries them
    assert campaign.load_result(2).kernel_facts == facts


@needs_triton
def test_show_mcp_and_report_carry_the_facts(
    planted: tuple[Campaign, RoundResult], capsys: pytest.CaptureFixture[str]
) -> None:
    from runner.cli.mcp_models import round_report
    from runner.render.report_rounds import round_section

    campaign, result = planted
    root = str(campaign.root.parent)
    code, out = run_cli(["--campaigns-root", root, "show", "2", "--campaign", "t"], capsys)
    assert code == 0 and f"WARNING {NAME}: over the LDS limit" in out
    answer = round_report(campaign, 2)
    assert any("over the LDS limit" in line for line in answer.kernel_facts)
    assert any(line.startswith(f"  {NAME}: ") and " -> " in line for line in answer.kernel_facts)
    html = round_section(result, campaign.round_dir(2), *_scale_and_links(result))
    assert 'class="kernel-facts"' in html and "over the LDS limit" in html


def _scale_and_links(result: RoundResult) -> tuple[Any, Any]:
    from runner.render.figures import score_scale

    return score_scale(result.score.metric, result.score), lambda _target: None


@needs_triton
def test_isa_writes_both_roles_and_a_readable_diff(
    planted: tuple[Campaign, RoundResult], capsys: pytest.CaptureFixture[str]
) -> None:
    campaign, _ = planted
    root = str(campaign.root.parent)
    code, out = run_cli(
        ["--campaigns-root", root, "isa", "--round", "2", "--campaign", "t"], capsys
    )
    assert code == 0, out
    folder = campaign.profiles_dir / "round-2"
    for role in ("incumbent", "candidate"):
        assert (folder / role / f"{NAME}.amdgcn").read_text(encoding="utf-8").count("v_mfma") > 0
    diff = (folder / "isa.diff").read_text(encoding="utf-8")
    assert diff.startswith(f"--- incumbent/{NAME}.amdgcn\n+++ candidate/{NAME}.amdgcn")
    assert ";" not in "".join(ln for ln in diff.splitlines() if ln[:1] in "+-")
    assert f"{NAME}: +" in out and "isa.diff" in out


def test_isa_lists_the_baselines_one_role_and_refuses_a_record_without_facts(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    argv = ["--campaigns-root", str(campaign.root.parent), "isa", "--round", "1"]
    code, out = run_cli(argv, capsys)  # the baseline records the base's facts
    assert code == 0 and f"incumbent {NAME}: " in out and "identical" in out, out
    # a round recorded by a runner from before kernel facts: refused, saying why
    old = json.loads(campaign.result_path(1).read_text(encoding="utf-8"))
    del old["kernel_facts"]
    write_json_atomic(campaign.result_path(1), old)
    code, out = run_cli(argv, capsys)
    assert code == 2 and "recorded no kernel facts" in out


# Recorded format: the tail of the AMDGCN Triton 3.6.0 writes for gfx942 (the metadata
# block's keys and LLVM's comment lines as it prints them), a kernel that spills nothing
# yet uses scratch: the case upstream's grouped GEMM showed (docs/analysis.md §2).
AMDGCN = """\
_k:
\tv_mfma_f32_32x32x16_fp8_fp8 a[0:15], v[2:3], v[4:5], a[0:15]
\tglobal_load_dwordx4 v[8:11], v1, s[0:1]
\tds_read_b128 v[12:15], v2
\tscratch_store_dword off, v3, s4 offset:16
\ts_waitcnt vmcnt(0) lgkmcnt(0)
\tscratch_load_dword v3, off, s4 offset:16
\ts_endpgm
; codeLenInByte = 1234
; Occupancy: 4
\t.amdgpu_metadata
---
amdhsa.kernels:
  - .agpr_count:     16
    .group_segment_fixed_size: 0
    .private_segment_fixed_size: 592
    .sgpr_count:     40
    .sgpr_spill_count: 0
    .vgpr_count:     120
    .vgpr_spill_count: 0
\t.end_amdgpu_metadata
"""


def test_amdgcn_facts_count_scratch_where_the_spill_counter_reads_zero() -> None:
    facts = parse_amdgcn(AMDGCN, "gfx942", num_warps=8, shared_bytes=65536)
    assert facts["vgpr_spill"] == 0 and facts["scratch_bytes"] == 592
    assert facts["scratch_instructions"] == 2
    assert (facts["vgpr"], facts["agpr"], facts["sgpr"]) == (120, 16, 40)
    assert (facts["mfma"], facts["global_loads"], facts["lds_loads"], facts["waits"]) == (
        1,
        1,
        1,
        1,
    )
    assert facts["code_bytes"] == 1234 and facts["occupancy_reported"] == 4
    assert facts["occupancy"] == 2  # 64 KiB of LDS: one workgroup of 8 waves per CU
    said = warnings("gfx942", {**facts, "scratch_bytes": 0, "scratch_instructions": 0}, facts)
    assert said == ["new scratch: scratch_bytes 0 -> 592, scratch_instructions 0 -> 2"]


def test_warnings_name_lds_overflow_spills_and_occupancy() -> None:
    old = {"shared_bytes": 32768, "vgpr_spill": 0, "occupancy": 2}
    new = {"shared_bytes": 98304, "vgpr_spill": 21, "occupancy": 1}
    said = warnings("gfx942", old, new)
    assert said[0].startswith("over the LDS limit: 98304 B of 65536 B on gfx942")
    assert said[1] == "new spills: vgpr_spill 0 -> 21"
    assert said[2] == "occupancy down: 2 -> 1 waves per SIMD"
    assert warnings("gfx950", old, {**old, "shared_bytes": 98304}) == []


def test_ptx_facts_take_ptxas_registers_and_spills() -> None:
    ptx = (
        "\twgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {...};\n"
        "\tld.global.v4.u32 {...};\n"
    )
    ptxas = (
        "ptxas info    : Used 168 registers, used 1 barriers\n"
        "ptxas info    : 8 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n"
    )
    facts = parse_ptx(ptx, 98304, ptxas)
    assert (facts["wgmma"], facts["global_loads"], facts["regs"]) == (1, 1, 168)
    assert facts["spill_bytes"] == 16 and facts["scratch_bytes"] == 8


def _rolled(n: int, facts: KernelFacts | None, base: RoundResult) -> RoundResult:
    return dataclasses.replace(base, round=n, status=Status.ROLLED_BACK, kernel_facts=facts)


def test_status_names_profile_after_two_rollbacks_and_isa_after_three(slow_tiny: Path) -> None:
    base = Campaign.load(slow_tiny / "campaigns" / "t").load_result(1)
    facts = KernelFacts.from_dict(
        {
            "arch": "gfx942",
            "triton": "3.6.0",
            "warnings": ["k: new spills: vgpr_spill 0 -> 21"],
            "roles": {
                "incumbent": {"k": {"facts": {"vgpr": 128, "occupancy": 2}}},
                "candidate": {"k": {"facts": {"vgpr": 256, "occupancy": 1}}},
            },
        }
    )
    one = [base, _rolled(2, facts, base)]
    assert analysis_lines(one, 1, "c") == []
    two = dict(analysis_lines([*one, _rolled(3, facts, base)], 2, "c"))
    assert two["analysis"].endswith("campaign profile --round 3 --campaign c")
    assert "analysis isa" not in two
    assert two["facts round-3 #1"] == "k: VGPRs 128 -> 256, waves per SIMD 2 -> 1"
    assert two["facts round-2 warning #1"] == "k: new spills: vgpr_spill 0 -> 21"
    three = dict(analysis_lines([*one, _rolled(3, facts, base), _rolled(4, None, base)], 3, "c"))
    assert three["analysis isa"].endswith("campaign isa --round 4 --campaign c")
    assert three["facts round-4"].startswith("none recorded")


def test_the_facts_arch_defaults_to_gfx942_and_an_old_manifest_loads() -> None:
    assert "facts_gpu" not in MANIFEST  # a manifest written before the field
    assert facts_arch(manifest()) == "gfx942"
    assert facts_arch(manifest(target_gpu="gfx950")) == "gfx950"
    assert facts_arch(manifest(target_gpu="gfx950", facts_gpu="sm90")) == "sm90"
    with pytest.raises(ConfigError, match="kernel facts compile for gfx942, gfx950, sm90"):
        manifest(facts_gpu="gfx90a")


def _entry(isa: str, **facts: int) -> KernelEntry:
    return KernelEntry(file="k.py", case="c", config={}, facts=dict(facts), isa=isa)


def test_a_tournament_entry_gets_its_own_pair_of_roles_and_warnings() -> None:
    k = _entry("/nowhere/k.amdgcn", shared_bytes=32768, vgpr_spill=0)
    big = _entry("/nowhere/k.amdgcn", shared_bytes=98304, vgpr_spill=0)
    roles = {"incumbent": {"k": k}, "candidate-1": {"k": k}, "candidate-2": {"k": big}}
    facts = KernelFacts("gfx942", "3.6.0", roles, warnings=("all roles",))
    one, two = facts.for_role("candidate-1"), facts.for_role("candidate-2")
    assert one.roles == {"incumbent": {"k": k}, "candidate": {"k": k}} and one.warnings == ()
    assert two.warnings == (
        "k: over the LDS limit: 98304 B of 65536 B on gfx942 "
        "(it fails to launch there: OutOfResources)",
    )
    assert facts.for_role("candidate-3").roles == {}
    assert KernelFacts.from_dict(facts.to_dict()) == facts  # what result.json keeps


def test_each_tournament_entry_keeps_the_incumbent_s_assembly(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    """The entries of a tournament share the incumbent's kernels: saving one entry's
    assembly into its round leaves the next entry's incumbent where the compile put it,
    so every entry's ``profiles/round-N/incumbent/`` gets it."""
    from runner.round.kernel_facts import save_isa

    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    compiled = tmp_path / "cache"
    compiled.mkdir()
    for name in ("inc.amdgcn", "one.amdgcn", "two.amdgcn"):
        (compiled / name).write_text(f"; {name}\n", encoding="utf-8")
    roles = {
        "incumbent": {"k": _entry(str(compiled / "inc.amdgcn"))},
        "candidate-1": {"k": _entry(str(compiled / "one.amdgcn"))},
        "candidate-2": {"k": _entry(str(compiled / "two.amdgcn"))},
    }
    facts = KernelFacts("gfx942", "3.6.0", roles)
    for n, role in ((2, "candidate-1"), (3, "candidate-2")):
        saved = save_isa(campaign, n, facts.for_role(role))
        for side in ("incumbent", "candidate"):
            kept = campaign.root / saved.roles[side]["k"].isa
            assert kept == campaign.profiles_dir / f"round-{n}" / side / kept.name
            assert kept.is_file(), kept
    assert facts.roles["incumbent"]["k"].isa == str(compiled / "inc.amdgcn")  # unchanged


@needs_triton
@pytest.mark.skipif(not isolation_works(), reason="needs a mount namespace")
def test_a_round_s_compile_runs_isolated_as_its_jobs_do(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    """The facts' compile imports the measured tree's code on the host: in a round it
    runs as the round's jobs do (``RoundPlan.isolate``), so a kernel module that writes into
    the campaign folder at import cannot, and its compile fails, named in the note."""
    import shutil

    from runner.executors.local import LocalExecutor
    from runner.round.context import RoundPlan
    from runner.round.kernel_facts import round_facts

    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    hostile = tmp_path / "tree"
    shutil.copytree(campaign.manifest.source, hostile, ignore=shutil.ignore_patterns(".git"))
    planted = campaign.root / "planted-by-the-compile"
    with (hostile / KERNEL).open("a", encoding="utf-8") as fh:
        fh.write(f"\nopen({str(planted)!r}, 'w').write('x')\n")
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _m: None, tmp_path / "r", 2, "quick")
    facts = round_facts(campaign, {"candidate": hostile}, rnd.isolate)
    assert not planted.exists()
    assert facts.note is not None and "did not compile" in facts.note, facts


def test_a_compile_s_record_names_only_assembly_in_its_own_folder(tmp_path: Path) -> None:
    """A compile's ``facts.json`` (written by a process that imported the measured tree)
    may name an assembly file only inside its folder: a path out of it is dropped, so
    the round never copies another file of the host into its records."""
    from runner.round.kernel_facts import role_facts

    folder = tmp_path / "compile"
    folder.mkdir()
    (folder / "k.amdgcn").write_text("; k\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("not the round's\n", encoding="utf-8")
    secret = str(tmp_path / "secret.txt")
    kernels = {
        "k": {"case": "c", "config": {}, "facts": {"vgpr": 1}, "isa": "k.amdgcn"},
        "away": {"case": "c", "config": {}, "facts": {}, "isa": "../secret.txt"},
        "abs": {"case": "c", "config": {}, "facts": {}, "isa": secret},
    }
    (folder / "facts.json").write_text(json.dumps({"kernels": kernels}), encoding="utf-8")
    got, _notes = role_facts({"k.py": folder})
    assert got["k"].isa == str((folder / "k.amdgcn").resolve()) and got["k"].file == "k.py"
    assert got["away"].isa == "" and got["abs"].isa == ""


def test_a_workspace_tree_s_compile_imports_its_package_from_src(tmp_path: Path) -> None:
    """In workspace mode a role's tree holds the package under ``src/`` (its
    ``src/UPSTREAM.yaml`` says so) and the kernel file is ``src/<package>/...``: the
    compile (and the profiler) run with ``src/`` first on the path.  With the tree alone
    there, upstream's kernel file on an H100 read "No module named 'primus_turbo'"."""
    import sys

    from runner.round.kernel_facts import tree_pythonpath
    from runner.store.workspace import RECORD

    tree = tmp_path / "ws"
    package = tree / "src" / "rt_ws_pkg"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("WHERE = 'src'\n", encoding="utf-8")
    (tree / "src" / RECORD).write_text("upstream: {}\n", encoding="utf-8")
    path = tree_pythonpath(tree).split(os.pathsep)
    assert path[:2] == [str(tree / "src"), str(tree)]
    probe = [sys.executable, "-c", "import rt_ws_pkg; print(rt_ws_pkg.WHERE)"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    done = subprocess.run(probe, cwd=tree, env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "src"
    (tree / "src" / RECORD).unlink()  # a plain checkout: the tree itself first
    assert tree_pythonpath(tree).split(os.pathsep)[0] == str(tree)
