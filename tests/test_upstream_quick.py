"""Upstream's quick script is the campaign's quick script (docs/protocol.md §3.1): init
copies the template from the checkout with the backend set and the commit recorded;
BASELINE fills SHAPES; a VALIDATE round runs it through the tool (its CRLF CSV read by
the pinned reader, its log kept as quick_validation.log); an engineer's edit takes
effect in the next round and is named; a FAIL row stops the round.

``tests/data/upstream_quick`` stands for upstream's template (same markers, columns
and ``csv.DictWriter``; no torch)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import speedup_patch

from runner.core.csv_schema import GEMM_SCHEMA
from runner.core.errors import ConfigError
from runner.core.outcomes import Status
from runner.executors.local import LocalExecutor
from runner.flow.validate import Request, validate_round
from runner.store.campaign import Campaign
from runner.store.upstream_quick import (
    QUICK_CSV,
    TEMPLATE,
    copy_template,
    failed_rows,
    fill_shapes,
    load_record,
    read_quick_csv,
    take_edit,
)

DATA = Path(__file__).parent / "data"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]


def checkout_with_template(tmp_path: Path) -> Path:
    repo = tmp_path / "Primus-Turbo"
    shutil.copytree(DATA / "pt_triton_stack", repo)
    shutil.copytree(DATA / "upstream_quick", repo, dirs_exist_ok=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run([*GIT, "-C", str(repo), "add", "-A"], check=True)
    subprocess.run([*GIT, "-C", str(repo), "commit", "-qm", "upstream"], check=True)
    return repo


def test_init_copies_upstream_template_with_the_backend(tmp_path: Path) -> None:
    from runner.flow.new_campaign import CampaignFields, create_campaign

    repo = checkout_with_template(tmp_path)
    campaign = create_campaign(
        tmp_path / "c",
        CampaignFields(
            source=str(repo),
            target="primus-turbo",
            target_op="gemm_fp8",
            granularity="blockwise",
            target_backend="TRITON",
            target_gpu="sm90",
            executor="local",
            target_shapes=["Llama-2-7B-qkv-mb1-4096x12288x4096"],
            heldout=False,
        ),
    )
    text = campaign.quick_script.read_text()
    assert 'setdefault("PRIMUS_TURBO_GEMM_BACKEND", "TRITON")' in text
    assert "# Fill from representative_shapes" in text  # SHAPES still empty
    head = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    record = load_record(campaign.root)
    assert record is not None and record["commit"] == head and record["template"] == TEMPLATE


def test_filled_template_runs_and_its_csv_is_read(tmp_path: Path) -> None:
    repo = checkout_with_template(tmp_path)
    root = tmp_path / "camp"
    root.mkdir()
    script = copy_template(repo, root, "triton")
    assert script is not None
    fill_shapes(root, script, [{"label": "s1", "M": 256, "N": 512, "K": 1024}])
    assert take_edit(root, script) == ""  # the tool's own write is no edit
    out = tmp_path / "q.csv"
    subprocess.run([sys.executable, str(script), "--summary-csv", str(out)], check=True)
    assert b"\r\n" in out.read_bytes()  # csv.DictWriter's line ending
    csv = read_quick_csv(out, GEMM_SCHEMA.header)
    assert csv.labels() == ["s1"] and failed_rows(csv) == []
    script.write_text(
        script.read_text().replace("FAIL_LABELS: List[str] = []", 'FAIL_LABELS: List[str] = ["s1"]')
    )
    note = take_edit(root, script)
    assert "edited since its last run" in note and '+FAIL_LABELS: List[str] = ["s1"]' in note
    assert take_edit(root, script) == ""  # named once
    proc = subprocess.run([sys.executable, str(script), "--summary-csv", str(out)])
    assert proc.returncode == 1 and failed_rows(read_quick_csv(out, None)) == ["s1"]


def test_shapes_filled_twice_keep_the_rest_of_the_script(tmp_path: Path) -> None:
    """BASELINE fills SHAPES with every target, then narrows it to the representative
    shapes.  The second fill took everything up to the next line starting with ``]``
    (the end of SUMMARY_CSV_HEADER), so on an H100 upstream's round-2 quick run read
    "name 'CONFIG' is not defined"; now only the SHAPES assignment is replaced."""
    repo = checkout_with_template(tmp_path)
    root = tmp_path / "camp"
    root.mkdir()
    script = copy_template(repo, root, "triton")
    assert script is not None
    shapes = [{"label": f"s{i}", "M": 256 * i, "N": 512, "K": 1024} for i in (1, 2, 3)]
    fill_shapes(root, script, shapes)
    once = script.read_text()
    fill_shapes(root, script, shapes[1:])
    twice = script.read_text()
    for name in ("CONFIG = Float8QuantConfig(", "SUMMARY_CSV_HEADER", "FAIL_LABELS"):
        assert once.count(name) == twice.count(name) >= 1, name
    assert "'s1'" in once and "'s1'" not in twice and "'s3'" in twice
    out = tmp_path / "q.csv"
    subprocess.run([sys.executable, str(script), "--summary-csv", str(out)], check=True)
    assert read_quick_csv(out, GEMM_SCHEMA.header).labels() == ["s2", "s3"]
    script.write_text(twice.replace("SHAPES: List", "SHAPES_OLD: List"))
    with pytest.raises(ConfigError, match="no single `SHAPES"):
        fill_shapes(root, script, shapes)


def test_validate_runs_the_quick_script_and_a_fail_row_stops_the_round(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    script = copy_template(checkout_with_template(tmp_path), campaign.root, "TRITON")
    assert script is not None
    rep = campaign.manifest.representative_shapes
    fill_shapes(campaign.root, script, [{"label": s, "M": 16, "N": 128, "K": 128} for s in rep])
    # the engineer's edit: the first representative shape fails its check
    script.write_text(
        script.read_text().replace(
            "FAIL_LABELS: List[str] = []", f"FAIL_LABELS: List[str] = [{rep[0]!r}]"
        )
    )
    request = Request(2, "quantise the weight once", speedup_patch(campaign.root.parent.parent))
    result = validate_round(campaign, LocalExecutor(), request, progress=lambda _m: None)
    assert result.status is Status.FAILED
    assert "Check FAIL on the candidate for " + rep[0] in result.reasons[0]
    artifacts = campaign.artifacts_dir(2)
    log = (artifacts / "quick_validation.log").read_text()
    assert "edited since its last run" in log
    assert b"\r\n" in (artifacts / QUICK_CSV).read_bytes()


@pytest.mark.parametrize(
    ("op", "granularity", "ran"),
    [
        ("gemm_fp8", "blockwise", "gemm_fp8 BLOCKWISE"),
        ("gemm_fp8", "tensorwise", "gemm_fp8 TENSORWISE"),
        ("gemm_fp8", "rowwise", "gemm_fp8 ROWWISE"),
        ("gemm", None, "gemm bf16"),
        ("grouped_gemm_fp8", "blockwise", None),
        ("gemm_fp8", "mx_blockwise", None),
    ],
)
def test_template_is_adapted_to_the_campaigns_op(
    tmp_path: Path, op: str, granularity: str | None, ran: str | None
) -> None:
    """The template is the blockwise FP8 GEMM's: init sets CONFIG (or the BF16 op) for
    the campaign; an op it cannot be adapted to keeps the tool's own quick script."""
    repo = checkout_with_template(tmp_path)
    root = tmp_path / "camp"
    root.mkdir()
    script = copy_template(repo, root, "triton", op, granularity)
    if ran is None:
        assert script is None and load_record(root) is None
        return
    assert script is not None
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert proc.returncode == 0 and f"op: {ran}" in proc.stdout, proc.stderr
    record = load_record(root)
    assert record is not None and (record["op"], record["granularity"]) == (op, granularity)


def test_a_template_without_the_config_block_is_refused(tmp_path: Path) -> None:
    repo = checkout_with_template(tmp_path)
    template = repo / TEMPLATE
    template.write_text(template.read_text().replace("CONFIG = Float8QuantConfig(", "C = ("))
    with pytest.raises(ConfigError, match="no `CONFIG = Float8QuantConfig"):
        copy_template(repo, tmp_path, "triton", "gemm_fp8", "rowwise")


def test_a_tournament_runs_the_quick_script_on_each_entry_and_a_fail_fails_that_entry_alone(
    slow_tiny: Path, tmp_path: Path, copy_campaign: Callable[[Path, Path, str], Path]
) -> None:
    """Each entry of a tournament passes upstream's hard gate on its own tree, as a single
    round does: the one whose script reports FAIL fails alone, its log and CSV kept in its
    own round's artifacts (``quick_checks``); through ``validate``, entries
    that all fail it are FAILED rounds naming the check, nothing measured."""
    from runner.compare.entries import Entry
    from runner.flow.entry_tests import quick_checks
    from runner.flow.validate import validate
    from runner.round.context import RoundPlan

    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    script = copy_template(checkout_with_template(tmp_path), campaign.root, "TRITON")
    assert script is not None
    rep = campaign.manifest.representative_shapes
    fill_shapes(campaign.root, script, [{"label": s, "M": 16, "N": 128, "K": 128} for s in rep])
    # the script fails its first shape in a tree whose kernel defines QUICK_FAIL
    kernel = "turbo_kernels/pytorch/kernels/quantization.py"
    failing = f"[{rep[0]!r}] if 'QUICK_FAIL' in open({kernel!r}).read() else []"
    script.write_text(
        script.read_text().replace("FAIL_LABELS: List[str] = []", f"FAIL_LABELS = {failing}")
    )
    source = Path(campaign.manifest.source)
    entries = [Entry(Request(2, "passes", "x"), 1), Entry(Request(3, "fails its check", "x"), 2)]
    for entry, marked in zip(entries, (False, True), strict=True):
        entry.tree = tmp_path / entry.role
        subprocess.run(["git", "clone", "-q", str(source), str(entry.tree)], check=True)
        if marked:
            with (entry.tree / kernel).open("a", encoding="utf-8") as out:
                out.write("QUICK_FAIL = 1\n")
    rnd = RoundPlan(campaign, LocalExecutor(), lambda _m: None, tmp_path / "r", 2, "quick")
    rnd.tmp.mkdir()
    quick_checks(rnd, entries)
    passed, failed = entries
    assert passed.failure is None
    assert failed.failure is not None
    assert f"Check FAIL on the {failed.role} for {rep[0]}" in failed.failure
    for entry in entries:
        artifacts = campaign.artifacts_dir(entry.n)
        assert (artifacts / "quick_validation.log").is_file()
        assert (artifacts / QUICK_CSV).is_file()
        shutil.rmtree(campaign.round_dir(entry.n))

    def defines(value: int) -> str:  # the kernel file with one more constant
        text = (source / kernel).read_text(encoding="utf-8")
        (source / kernel).write_text(text + f"QUICK_FAIL = {value}\n", encoding="utf-8")
        try:
            return subprocess.run(
                ["git", "-C", str(source), "diff"], check=True, capture_output=True, text=True
            ).stdout
        finally:
            (source / kernel).write_text(text, encoding="utf-8")

    requests = [Request(2, "one constant", defines(1)), Request(3, "another", defines(2))]
    results = validate(campaign, LocalExecutor(), requests, progress=lambda _m: None)
    assert [r.status for r in results] == [Status.FAILED, Status.FAILED]
    for r in results:
        assert f"Check FAIL on the candidate-{r.round - 1} for {rep[0]}" in r.reasons[0], r
        passes = campaign.artifacts_dir(r.round) / "passes"
        assert not any(p.name.startswith("pass-") for p in passes.glob("*"))  # none measured
