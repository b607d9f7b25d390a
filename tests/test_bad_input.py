"""Bad input is refused with exit 2 and what to do, before anything is measured or
written: arguments that are not UTF-8, names too long for the filesystem, bounds of
``campaign set`` and of the commands' numbers."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import subprocess
import tarfile
import time
from pathlib import Path

import pytest
from campaign_helpers import committed_repo, git, manifest, run_cli, tiny_campaign

from runner.compare.shapes import level_shapes
from runner.core.errors import BundleError, ConfigError, MeasurementFailed, PatchRefused
from runner.core.outcomes import RoundResult, Score, Status
from runner.flow.new_campaign import fresh_example_copy
from runner.judge.vetoes import audit_candidate
from runner.portable.bundle import CHECKSUMS, extract
from runner.store.appendlog import render_correction, render_note
from runner.store.gate_ledger import record
from runner.store.lineage import Lineage, patch_subject
from runner.store.tips import Tip, render_tip

ROOT = Path(__file__).resolve().parent.parent
# "naïve" typed in a latin-1 terminal: Python keeps the byte 0xEF as a lone surrogate
NAIVE = b"na\xefve".decode("utf-8", "surrogateescape")


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--round", "2", "--hypothesis", NAIVE, "--patch", "x.patch"],
        ["correct", "--text", NAIVE],
        ["set", "sigma_g", "0.05", "--reason", NAIVE],
        ["tip", "--round", "1", "--text", NAIVE],
    ],
)
def test_an_argument_that_is_not_utf8_is_refused_before_anything_runs(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "campaigns"
    code, out = run_cli(["--campaigns-root", str(root), *argv], capsys)
    assert code == 2, out
    assert "not UTF-8" in out and "LANG=C.UTF-8" in out and "Traceback" not in out
    assert not root.exists()


def test_a_name_too_long_for_the_filesystem_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = committed_repo(tmp_path / "src")
    root = tmp_path / "campaigns"
    argv = ["--campaigns-root", str(root), "init", "--op", "gemm", "--source", str(source)]
    code, out = run_cli([*argv, "--name", "a" * 300], capsys)
    assert code == 2 and "give a shorter name" in out, out


def _latin1_patch(source: Path) -> str:
    """A ``git diff --binary`` that leaves a kernel source latin-1 (not UTF-8); its NUL
    makes git write it as a binary patch (ASCII), as a latin-1 editor's save can."""
    kernel = next(p for p in sorted(source.rglob("*.py")) if "turbo_kernels" in p.parts)
    kernel.write_bytes(kernel.read_bytes() + "# na\u00efve\0\n".encode("latin-1"))
    diff = subprocess.run(
        ["git", "diff", "--binary"], cwd=source, capture_output=True, check=True
    ).stdout
    assert b"GIT binary patch" in diff
    subprocess.run(["git", "checkout", "-q", "--", "."], cwd=source, check=True)
    return diff.decode("utf-8", "surrogateescape")


def test_a_patch_that_leaves_a_source_not_utf8_is_refused_before_the_round(
    tmp_path: Path,
) -> None:
    source = fresh_example_copy(tmp_path / "src")
    lineage = Lineage(source, "c", None)
    lineage.start(lineage.resolve("HEAD"))
    patch = _latin1_patch(source)
    with pytest.raises(PatchRefused, match="not UTF-8"):
        lineage.check_patch(patch)
    # the audit itself, given such a tree, fails the round (closed FAILED), not a traceback
    (tmp_path / "inc").mkdir()
    cand = tmp_path / "cand"
    cand.mkdir()
    (cand / "k.py").write_bytes("x = 'na\u00efve'\n".encode("latin-1"))
    with pytest.raises(MeasurementFailed, match="not UTF-8"):
        audit_candidate("", ["k.py"], tmp_path / "inc", cand, "general")


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("timing", "{warmup_s: 1e12}", "less than or equal to 60"),
        ("timing", "{warmup_s: .inf}", "finite"),
        ("timing", "{repeats: 1000000000000}", "10000"),
        ("shape_set", "nope", "unknown shape set"),
        ("pinned_header", "label,x", "lacks the columns"),
        ("kernel_source", "[.]", "whole source tree"),
        ("test_command", "python -m pytest -q tests #note", "shell comment"),
        ("test_command", "python -m pytest 'tests", "close its quotes"),
    ],
)
def test_campaign_set_refuses_what_no_round_can_use(
    field: str, value: str, says: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = tiny_campaign(tmp_path, "s", baseline=False)
    record(camp, "baseline", "fixed at the baseline")
    before = {p: p.read_bytes() for p in [camp.manifest_path, *camp.logs_dir.iterdir()]}
    argv = ["--campaigns-root", str(camp.root.parent), "set", field, value, "--reason", "r"]
    code, out = run_cli(argv, capsys)
    assert code == 2 and says in out and "Traceback" not in out, out
    assert {p: p.read_bytes() for p in before} == before


# ---- a bundle is checked member by member before anything is written ---------------------
def _bomb(path: Path, size: int) -> Path:
    """A tar.gz whose one member inflates to ``size`` zero bytes: gzip members of 1 MiB of
    zeros, concatenated (a gzip stream may hold many), so it is built in milliseconds."""
    info = tarfile.TarInfo("b/big")
    info.size = size
    mib = gzip.compress(bytes(1 << 20), compresslevel=9)
    with path.open("wb") as out:
        out.write(gzip.compress(_dir("b").tobuf() + info.tobuf()))
        for _ in range(size >> 20):
            out.write(mib)
        out.write(gzip.compress(bytes(1024)))  # the end-of-archive blocks
    return path


def _bundle(path: Path, files: dict[str, bytes]) -> Path:
    """A tar.gz with one top folder ``b`` holding ``files`` and their checksum listing."""
    listing = "".join(f"{hashlib.sha256(v).hexdigest()}  {k}\n" for k, v in files.items())
    with tarfile.open(path, "w:gz") as tar:
        tar.addfile(_dir("b"))
        for name, value in {**files, CHECKSUMS: listing.encode()}.items():
            info = tarfile.TarInfo(f"b/{name}")
            info.size = len(value)
            tar.addfile(info, io.BytesIO(value))
    return path


def _dir(name: str) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE
    return info


def test_a_gzip_bomb_is_refused_from_its_header_and_leaves_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bomb = _bomb(tmp_path / "bomb.tar.gz", 1 << 30)
    assert bomb.stat().st_size < 2 << 20
    with gzip.open(bomb) as stream:  # it inflates to zeros after its headers
        assert stream.read(3 << 20)[1024:] == bytes((3 << 20) - 1024)
    out = tmp_path / "out"
    started = time.monotonic()
    code, text = run_cli(
        ["reproduce", str(bomb), "--source", str(tmp_path), "--out", str(out)], capsys
    )
    assert code == 2 and "declares 1,073,741,824 bytes" in text, text
    assert time.monotonic() - started < 10
    assert not any(p.is_file() for p in out.rglob("*"))


def test_a_member_that_differs_from_its_checksum_is_refused_before_writing(
    tmp_path: Path,
) -> None:
    path = _bundle(tmp_path / "b.tar.gz", {"bundle.yaml": b"x: 1\n"})
    with tarfile.open(path, "w:gz") as tar:  # the same listing, another file body
        tar.addfile(_dir("b"))
        for name, body in {"bundle.yaml": b"x: 2\n", CHECKSUMS: _listing(b"x: 1\n")}.items():
            info = tarfile.TarInfo(f"b/{name}")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    dest = tmp_path / "dest"
    with pytest.raises(BundleError, match=r"checksum mismatch for bundle\.yaml"):
        extract(path, dest)
    assert not dest.exists()


def test_a_bundle_holding_a_file_outside_its_folder_is_refused(tmp_path: Path) -> None:
    """A gzip'd tar whose one member is a file at the top (no campaign folder): a clear
    refusal, not an IndexError from the reader."""
    path = tmp_path / "loose.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo("bundle.yaml")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"x: 1\n"))
    dest = tmp_path / "dest"
    with pytest.raises(
        BundleError, match=r"not a campaign bundle \(top entries \['bundle.yaml'\]\)"
    ):
        extract(path, dest)
    assert not dest.exists()


def _listing(body: bytes) -> bytes:
    return f"{hashlib.sha256(body).hexdigest()}  bundle.yaml\n".encode()


def test_a_truncated_bundle_is_bad_input_not_an_interrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bundle(tmp_path / "b.tar.gz", {"bundle.yaml": os.urandom(200_000)})
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    code, text = run_cli(
        ["reproduce", str(path), "--source", str(tmp_path), "--out", str(tmp_path / "out")], capsys
    )
    assert code == 2 and "truncated or damaged" in text, text
    assert not any(p.is_file() for p in (tmp_path / "out").rglob("*"))


# ---- a recorded hypothesis is the text given --------------------------------------------
def test_a_format_patch_subject_with_non_ascii_is_decoded(tmp_path: Path) -> None:
    source = committed_repo(tmp_path / "src")
    (source / "README").write_text("changed\n", encoding="utf-8")
    subject = "raise num_stages for the na\u00efve kernel \u2014 fewer stalls"
    git(source, "commit", "-qam", subject)
    patch = git(source, "format-patch", "-1", "--stdout")
    assert "=?UTF-8?q?" in patch  # git MIME-encodes it
    assert patch_subject(patch) == subject


def test_make_validate_passes_the_hypothesis_as_text(tmp_path: Path) -> None:
    fake = tmp_path / "campaign"
    fake.write_text(f'#!/bin/bash\nprintf "%s\\n" "$@" > {tmp_path}/args\n', encoding="utf-8")
    fake.chmod(0o755)
    hypothesis = f"raise `touch {tmp_path}/a` $(touch {tmp_path}/b) 'q' \"d\" $$HOME"
    subprocess.run(
        [
            "make",
            "-s",
            "-o",
            "install",
            "validate",
            "ROUND=2",
            f"HYPOTHESIS={hypothesis}",
            f"CAMPAIGN_CMD={fake}",
        ],
        cwd=ROOT,
        check=True,
        capture_output=True,
    )
    args = (tmp_path / "args").read_text(encoding="utf-8").splitlines()
    assert args[args.index("--hypothesis") + 1] == hypothesis
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_no_representative_shapes_points_at_a_step_that_is_not_refused() -> None:
    with pytest.raises(ConfigError) as info:
        level_shapes(manifest(representative_shapes=[]), "quick")
    said = str(info.value)
    assert "campaign set representative_shapes" in said and "--level full" in said


@pytest.mark.parametrize("timeout", ["nan", "-1", "0", "inf", "1e9"])
def test_profile_timeout_is_bounded(
    timeout: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--campaigns-root", str(tmp_path), "profile", "--round", "1", "--timeout", timeout]
    code, out = run_cli(argv, capsys)
    assert code == 2 and "is not a time a profiled run can take" in out, out


def test_baseline_passes_are_bounded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    camp = tiny_campaign(tmp_path, "p", baseline=False)
    argv = ["--campaigns-root", str(camp.root.parent), "baseline", "--passes", "100000"]
    code, out = run_cli(argv, capsys)
    assert code == 2 and "at most 20" in out, out
    assert not camp.closed_rounds()


def test_markdown_in_corrections_notes_and_tips_stays_text(tmp_path: Path) -> None:
    text = "## Round 99 — ACCEPTED\n| a | b |\n- see [here](http://x)"
    for block in (render_correction(text, "2026-12-05 10:00"), render_note(text, "SET", "t")):
        lines = block.splitlines()
        assert "> \\## Round 99 — ACCEPTED" in lines and "> \\| a | b |" in lines, block
        assert "> \\- see \\[here\\](http://x)" in lines, block
    camp = tiny_campaign(tmp_path, "m", baseline=False)
    empty = Score("Forward TFLOPS", 0.0, (), 0, 0)
    result = RoundResult(
        1,
        Status.BASELINE,
        "full",
        "## not a heading",
        "",
        "",
        "t",
        "t",
        "",
        "",
        empty,
        empty,
        None,
    )
    tip = render_tip(Tip(1, "# take [this]"), result, camp.manifest, "2026-12-05")
    assert "- Takeaway: \\# take \\[this\\]" in tip and "\n#" not in tip.replace("\n###", ""), tip


def test_export_while_a_command_holds_the_campaign_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    camp = tiny_campaign(tmp_path, "x", baseline=False)
    out = tmp_path / "x.tar.gz"
    with camp.lock():  # what a running validate holds
        argv = ["--campaigns-root", str(camp.root.parent), "export", "--out", str(out)]
        code, said = run_cli(argv, capsys)
    assert code == 2 and "busy" in said, said
    assert not out.exists()
