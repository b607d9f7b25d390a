"""Export a small real campaign and reproduce it from a fresh ``git clone`` of its
source, the way a user does on another host; tampered bundles are refused and a
different environment is reported.

One campaign for the module: a copy of the session's ``slow_tiny_speedup`` (conftest:
``slow_tiny``, tiny shapes and its baseline, and one round, the patch that removes the
slow base's waste; its fingerprints written with ``record_fingerprint`` the way the
round hook does).  Whatever that round's verdict on this machine (accepted or rolled
back), reproduce compares against what was recorded.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from campaign_helpers import plant_slow_base

from runner.cli import main
from runner.core.errors import ConfigError, FingerprintMismatch
from runner.flow.new_campaign import fresh_example_copy
from runner.portable.bundle import BUNDLE_YAML, CHECKSUMS, open_bundle, write_checksums
from runner.portable.reproduce import find_base
from runner.store.campaign import Campaign
from runner.store.fingerprint_check import (
    OVERRIDE_NAME,
    check_round_comparable,
    fingerprint_path,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def campaign(
    slow_tiny_speedup: Path,
    tmp_path_factory: pytest.TempPathFactory,
    copy_campaign: Callable[[Path, Path, str], Path],
) -> Campaign:
    """A private copy of ``slow_tiny_speedup`` (no baseline or round of its own)."""
    root = tmp_path_factory.mktemp("bundle") / "copy"
    return Campaign.load(copy_campaign(slow_tiny_speedup, root, "t"))


@pytest.fixture(scope="module")
def bundle(campaign: Campaign, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "t.bundle.tar.gz"
    cli(["--campaigns-root", str(campaign.root.parent), "export", "--out", str(out)], 0)
    return out


def cli_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    return int(exc.value.code or 0)


def cli(argv: list[str], code: int) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == code


def clone(campaign: Campaign, dest: Path) -> Path:
    subprocess.run(["git", "clone", "-q", campaign.manifest.source, str(dest)], check=True)
    return dest


def retar(bundle: Path, dest: Path, edit: str, how: str) -> Path:
    """Extract ``bundle``, change the file ``edit`` (``how``: csv or patch), re-tar."""
    work = dest / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(work, filter="data")
    target = work / "t" / edit
    text = target.read_text()
    target.write_text(text.replace("PASS", "PASS ", 1) if how == "csv" else text + "\n")
    out = dest / "tampered.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(work / "t", arcname="t")
    return out


def test_export_holds_everything_with_checksums(bundle: Path, tmp_path: Path) -> None:
    b = open_bundle(bundle, tmp_path)
    info = yaml.safe_load((b.root / BUNDLE_YAML).read_text())
    assert info["campaign"] == "t" and info["sigma_g"] > 0
    assert [r["round"] for r in info["rounds"]] == [1, 2]
    for rel in (
        "manifest.yaml",
        "schema/header.csv",
        "recipe/recipe.yaml",
        "rounds/round-1/result.json",
        "rounds/round-1/artifacts/benchmark.csv",
        "rounds/round-1/artifacts/fingerprint.yaml",
        "rounds/round-2/candidate.patch",
        "rounds/round-2/artifacts/incumbent.csv",
        "logs/performance_trend.md",
    ):
        assert (b.root / rel).is_file(), rel
    assert list(b.root.glob("rounds/round-2/artifacts/passes/*/samples.json"))
    listed = (b.root / CHECKSUMS).read_text()
    assert "  rounds/round-2/artifacts/benchmark.csv\n" in listed
    assert b.recipe["executor"] == "local" and b.recipe["python"]
    accepted = info["rounds"][1]["status"] == "ACCEPTED"
    assert len(b.lineage_patches()) == (1 if accepted else 0)


def test_reproduce_from_a_fresh_clone(
    campaign: Campaign, bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = clone(campaign, tmp_path / "clone")
    before = subprocess.run(
        ["git", "status", "--porcelain"], cwd=source, capture_output=True, text=True, check=True
    ).stdout
    accepted = campaign.load_result(2).status.value == "ACCEPTED"
    assert open_bundle(bundle, tmp_path / "b").default_round() == (2 if accepted else 1)
    out = tmp_path / "repro"
    # The default round (the last accepted) is replayed and measured: the mechanics are
    # asserted, not the verdict.  This campaign times each callable for 0.1 s on two
    # cores, so its recorded gain itself moves by 15 points between sessions (CI runs:
    # 1.157 recorded vs 1.309 here; 1.325 vs 1.253): a verdict on it would test luck.
    code = cli_code(["reproduce", str(bundle), "--source", str(source), "--out", str(out)])
    assert code in (0, 3)
    printed = capsys.readouterr().out
    assert f"report: {out / 'reproduction.md'}" in printed
    report = (out / "reproduction.md").read_text()
    assert "sigma_D = sigma_G * sqrt(" in report and "found by hash" in report
    replayed = "(identical tree)" if accepted else "no patches: round-N is the base commit"
    assert replayed in report
    # Round 1 against itself (A/A) must reproduce: the gain is 1 by construction.
    aa = tmp_path / "repro-aa"
    cli(
        [
            "reproduce",
            str(bundle),
            "--source",
            str(source),
            "--round",
            "1",
            "--out",
            str(aa),
            "--tolerance",
            "15",
        ],
        0,
    )
    assert ": REPRODUCED" in (aa / "reproduction.md").read_text()
    after = subprocess.run(
        ["git", "status", "--porcelain"], cwd=source, capture_output=True, text=True, check=True
    ).stdout
    assert after == before


def test_a_gain_the_code_does_not_deliver_is_not_reproduced(
    campaign: Campaign, bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bundle whose round-2 record claims 3x (a lucky or doctored record, re-sealed
    with fresh checksums so that only the claim is wrong): the replayed code cannot
    deliver it, so reproduce answers NOT REPRODUCED with exit 3."""
    work = tmp_path / "x"
    with tarfile.open(bundle) as tar:
        tar.extractall(work, filter="data")
    info = yaml.safe_load((work / "t" / BUNDLE_YAML).read_text())
    for row in info["rounds"]:
        if row["round"] == 2:
            row["ratio_vs_incumbent"] = 3.0
    (work / "t" / BUNDLE_YAML).write_text(yaml.safe_dump(info, sort_keys=False))
    write_checksums(work / "t")
    doctored = tmp_path / "claims-3x.tar.gz"
    with tarfile.open(doctored, "w:gz") as tar:
        tar.add(work / "t", arcname="t")
    source = clone(campaign, tmp_path / "clone")
    out = tmp_path / "repro"
    code = cli_code(
        ["reproduce", str(doctored), "--source", str(source), "--round", "2", "--out", str(out)]
    )
    assert code == 3
    report = (out / "reproduction.md").read_text()
    assert ": NOT REPRODUCED" in report and ": REPRODUCED" not in report
    assert "outside the 95% interval" in report
    assert "NOT REPRODUCED: gain vs baseline" in capsys.readouterr().out


def test_tampered_csv_and_patch_are_refused(
    bundle: Path, campaign: Campaign, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = clone(campaign, tmp_path / "clone")
    cases = [
        ("rounds/round-1/artifacts/benchmark.csv", "csv"),
        ("rounds/round-2/candidate.patch", "patch"),
    ]
    for i, (rel, how) in enumerate(cases):
        bad = retar(bundle, tmp_path / f"t{i}", rel, how)
        cli(["reproduce", str(bad), "--source", str(source), "--out", str(tmp_path / f"o{i}")], 2)
        err = capsys.readouterr().err
        assert f"checksum mismatch for {rel}" in err, err
        assert not (tmp_path / f"o{i}" / "reproduction.md").exists()


def test_missing_base_commit_says_fetch(
    bundle: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=other, check=True)
    (other / "x").write_text("x")
    subprocess.run(["git", "add", "x"], cwd=other, check=True)
    subprocess.run(
        ["git", "-c", "user.name=a", "-c", "user.email=a@b", "commit", "-qm", "x"],
        cwd=other,
        check=True,
    )
    cli(["reproduce", str(bundle), "--source", str(other), "--out", str(tmp_path / "o")], 2)
    err = capsys.readouterr().err
    assert "is not in" in err and "fetch it" in err


def test_different_environment_is_reported(
    campaign: Campaign, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_root = tmp_path / "campaigns"
    shutil.copytree(campaign.root, copy_root / "t", ignore=shutil.ignore_patterns(".lock"))
    copy = Campaign.load(copy_root / "t")
    for n in (1, 2):
        fp_path = fingerprint_path(copy, n)
        fp = yaml.safe_load(fp_path.read_text())
        fp["gpu"]["model"] = "AMD Instinct MI300X"
        fp["software"]["torch_version"] = "0.0.1+elsewhere"
        fp_path.write_text(yaml.safe_dump(fp))
    bundle = tmp_path / "env.tar.gz"
    cli(["--campaigns-root", str(copy_root), "export", "--out", str(bundle)], 0)
    source = clone(campaign, tmp_path / "clone")
    out = tmp_path / "repro"
    argv = ["reproduce", str(bundle), "--source", str(source), "--round", "2", "--out", str(out)]
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code in (0, 3)  # the verdict depends on this machine's noise
    printed = capsys.readouterr().out
    assert "environments differ in: gpu.model, software.torch_version" in printed
    report = (out / "reproduction.md").read_text()
    assert "**the environments differ**" in report and "`gpu.model`" in report
    assert "not comparable: the environments differ in gpu.model" in report
    accepted = campaign.load_result(2).status.value == "ACCEPTED"
    replayed = "(identical tree)" if accepted else "(ROLLED BACK): applied its candidate.patch"
    assert replayed in report
    with pytest.raises(FingerprintMismatch, match=r"gpu\.model"):
        check_round_comparable(copy, 1)
    check_round_comparable(copy, 1, "moved to a new host", record_in=2)
    assert "moved to a new host" in (copy.artifacts_dir(2) / OVERRIDE_NAME).read_text()


def test_fingerprint_is_recorded_per_round(campaign: Campaign) -> None:
    for n in (1, 2):
        fp = yaml.safe_load(fingerprint_path(campaign, n).read_text())
        assert fp["extra"]["measured_in"] == "host" and fp["software"]["python"]
    assert check_round_comparable(campaign, 2) is not None


def test_bad_round_and_out_are_refused(bundle: Path, campaign: Campaign, tmp_path: Path) -> None:
    out = tmp_path / "busy"
    out.mkdir()
    (out / "x").write_text("")
    for extra, where in ((["--round", "9"], tmp_path / "o"), ([], out)):
        with pytest.raises(SystemExit) as exc:
            main(
                [
                    "reproduce",
                    str(bundle),
                    "--source",
                    campaign.manifest.source,
                    "--out",
                    str(where),
                    *extra,
                ]
            )
        assert exc.value.code == ConfigError.return_code


def test_base_found_by_tree_in_an_unrelated_copy(bundle: Path, tmp_path: Path) -> None:
    """A fresh copy of the example package with the slow base committed again has
    another base hash but the same tree."""
    b = open_bundle(bundle, tmp_path / "b")
    copy = fresh_example_copy(tmp_path / "copy")
    plant_slow_base(copy)
    commit, note = find_base(copy, b)
    assert commit != b.info["base_commit"] and "has the same tree" in note
