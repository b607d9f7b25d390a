"""Tips at upstream's path (docs/protocol.md §6.8): in a checkout with upstream's ``agent/``
folder the tips file is ``agent/historical_experience/<gpu>/<op>_<granularity>/
<backend>/tips.md`` (upstream's kernel-optimize skill page, checked at a6a16cdc); ``init``
and ``status`` show what is there, ``campaign tip`` appends there (creating the folders,
adopting an upstream file that has no ledger), and that folder never enters a round's
patch."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from click.testing import CliRunner

from runner.cli import cli
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.tips import Tip, append_tip, tips_path

DATA = Path(__file__).parent / "data"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
UPSTREAM_TIPS = "# gemm_fp8_blockwise on this GPU\n\n- BLOCK_K=128 keeps the scales aligned\n"


def commit_all(repo: Path) -> None:
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "tips"], check=True)


def test_init_shows_the_tips_at_upstreams_path(tmp_path: Path) -> None:
    repo = tmp_path / "Primus-Turbo"
    shutil.copytree(DATA / "pt_triton_stack", repo)
    tips = repo / "agent/historical_experience/sm90/gemm_fp8_blockwise/triton/tips.md"
    tips.parent.mkdir(parents=True)
    tips.write_text(UPSTREAM_TIPS)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    commit_all(repo)
    args = [
        "--campaigns-root",
        str(tmp_path / "c"),
        "init",
        "--target",
        "primus-turbo",
        "--source",
        str(repo),
        "--op",
        "gemm_fp8",
        "--granularity",
        "blockwise",
        "--backend",
        "triton",
        "--gpu",
        "sm90",
        "--executor",
        "local",
    ]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    assert f"historical tips ({tips})" in res.output and "BLOCK_K=128" in res.output
    shown = CliRunner().invoke(cli, ["--campaigns-root", str(tmp_path / "c"), "status"])
    assert shown.exit_code == 0, shown.output
    assert f"tips: {tips}: 1 entry (read them)" in shown.output


def test_tip_appends_to_upstreams_file_and_never_enters_a_round(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    m = campaign.manifest
    source = Path(m.source)
    (source / "agent").mkdir()  # an upstream checkout: it has agent/
    path = tips_path(m, tmp_path / "elsewhere")
    rel = f"agent/historical_experience/{m.target_gpu}/{m.target_op}_{m.granularity}"
    assert path == source / rel / m.target_backend.lower() / "tips.md"
    path.parent.mkdir(parents=True)
    path.write_text(UPSTREAM_TIPS)  # upstream's file: no ledger
    append_tip(campaign, tmp_path / "elsewhere", Tip(1, "pad N to whole 128-blocks once"))
    text = path.read_text()
    assert text.startswith(UPSTREAM_TIPS) and "- Takeaway: pad N to whole 128-blocks once" in text
    assert not (tmp_path / "elsewhere").exists()
    # the appended tips file (and its ledger) are no change of the next round
    assert Lineage(source, campaign.name, None).working_tree_patch() == ""
