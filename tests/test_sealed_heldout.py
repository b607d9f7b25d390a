"""docs/reliability.md §7 row 22: the candidate cannot read the held-out shapes before ``accept``.

``manifest.yaml`` listed the held-out pick, so a change tuned to the targets and to the
held-out shapes (read from the manifest) was ACCEPTED by ``campaign accept``.  Now the
pick is sealed (``runner.store.sealed``): ``campaign init`` writes the labels, the seed
and a nonce into ``<campaign>/sealed/heldout.json``; the manifest keeps their count and
the salted digest; every local job runs with an empty file system over the sealed
folder (``runner.executors.isolation``: ``hidden``); ``campaign accept`` checks the
digest and refuses a changed or missing file.

The planted candidate: at import, the op module reads every file under the test's
folder (the campaign, its source, the round's worktrees and scratch, the JIT caches;
not git's compressed objects, nor copies of its own source, which list every label)
and its own environment and command line, and records which labels of the shape set
(public: the set is the harness's) it found where.  Before the seal it found the
held-out labels in manifest.yaml.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from campaign_helpers import manifest, run_cli

from runner.compare.loop import ROUND_CAP_ENV
from runner.core.errors import AppendOnlyViolation, ConfigError
from runner.core.shapes import shape_set
from runner.executors.isolation import isolated_argv, isolation_works
from runner.executors.local import LocalExecutor
from runner.flow.accept import acceptance_shapes
from runner.flow.validate import Request, validate_round
from runner.render.markdown import describe_heldout
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage
from runner.store.sealed import Sealed, heldout_labels, heldout_path, sealed_dir, write_sealed

OPS = "turbo_kernels/pytorch/ops/gemm_fp8.py"

# Appended to the candidate's op module: runs at import in every process of the
# candidate (its focused test, its workers).
PROBE = """

def _search_for_labels() -> None:
    import json
    import os

    labels = {labels!r}
    found = {{}}
    seen = 0

    def look(where, data):
        for label in labels:
            if label.encode() in data:
                found.setdefault(label, []).append(where)

    for root in {roots!r}:
        for folder, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".git"]  # compressed objects: no label shows
            for name in files:
                path = os.path.join(folder, name)
                try:
                    if os.path.islink(path) or os.path.getsize(path) > 8 << 20:
                        continue
                    with open(path, "rb") as fh:
                        data = fh.read()
                except OSError:
                    continue
                seen += 1
                if b"_search_for_labels" not in data:  # a copy of this probe lists them all
                    look(path, data)
    look("environment", repr(sorted(os.environ.items())).encode())
    with open("/proc/self/cmdline", "rb") as fh:
        look("command line", fh.read())
    report = os.path.join({report!r}, f"{{os.getpid()}}.json")
    with open(report, "w") as fh:
        json.dump({{"files": seen, "found": found}}, fh)


_search_for_labels()
"""


def _probe_patch(campaign: Campaign, roots: list[str], report: Path) -> str:
    m = campaign.manifest
    labels = sorted(s.label for s in shape_set(m.shape_set))
    lineage = Lineage(Path(m.source), campaign.name, None)
    with lineage.worktree(lineage.head()) as tree:
        with (tree / OPS).open("a", encoding="utf-8") as f:
            f.write(PROBE.format(labels=labels, roots=roots, report=str(report)))
        diff = subprocess.run(
            ["git", "diff", "HEAD"], cwd=tree, capture_output=True, text=True, check=True
        )
    return diff.stdout


def _reports(report: Path) -> list[dict[str, object]]:
    return [json.loads(p.read_text(encoding="utf-8")) for p in sorted(report.glob("*.json"))]


@pytest.mark.integration
@pytest.mark.skipif(not isolation_works(), reason="needs a mount namespace")
def test_a_candidate_that_searches_every_file_finds_no_held_out_label(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ROUND_CAP_ENV, "1")  # the verdict is not asserted: first pairs final
    campaign = Campaign.load(copy_campaign(slow_tiny, tmp_path / "c", "t"))
    m = campaign.manifest
    held = heldout_labels(campaign.root, m)
    assert held and m.heldout_digest and m.heldout_count == len(held)
    assert not m.heldout_shapes and m.heldout_seed is None
    report = tmp_path / "found"
    report.mkdir()
    roots = [str(tmp_path / "c")]
    patch = _probe_patch(campaign, roots, report)
    validate_round(
        campaign,
        LocalExecutor(),
        Request(campaign.next_round(), "probe", patch),
        progress=lambda _m: None,
    )
    reports = _reports(report)
    assert len(reports) >= 2, "the probe ran in the focused test and in the workers"
    for got in reports:
        found = got["found"]
        assert isinstance(found, dict) and isinstance(got["files"], int)
        assert got["files"] > 50  # it read the campaign, its source, the worktrees
        assert set(m.representative_shapes) <= set(found)  # it reads what it can reach
        assert not set(held) & set(found), {h: found[h] for h in held if h in found}
    # the same search from outside the jobs reads the sealed file: only the seal hides it
    (tmp_path / "host").mkdir()
    namespace: dict[str, object] = {}
    exec(PROBE.format(labels=held, roots=roots, report=str(tmp_path / "host")), namespace)
    (outside,) = _reports(tmp_path / "host")
    found = outside["found"]
    assert isinstance(found, dict) and set(held) <= set(found)
    assert all(p == str(heldout_path(campaign.root)) for h in held for p in found[h])


def test_status_report_and_show_print_no_held_out_label(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = copy_campaign(slow_tiny, tmp_path / "c", "t")
    held = heldout_labels(root, Campaign.load(root).manifest)
    outputs = []
    for argv in (
        ["status"],
        ["status", "--json"],
        ["show", "1"],
        ["show", "1", "--json"],
        ["report"],
    ):
        code, out = run_cli(["--campaigns-root", str(root.parent), *argv], capsys)
        assert code == 0, out
        outputs.append(out)
    files = [p for p in root.rglob("*") if p.is_file() and sealed_dir(root) not in p.parents]
    outputs += [p.read_text(encoding="utf-8", errors="replace") for p in files]
    assert not [h for h in held for text in outputs if h in text]
    assert f"{len(held)} sealed" in (root / "logs" / "optimize.md").read_text(encoding="utf-8")


def test_accept_reads_the_sealed_pick_and_refuses_a_changed_or_missing_one(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = copy_campaign(slow_tiny, tmp_path / "c", "t")
    accept = ["--campaigns-root", str(root.parent), "accept"]
    m = Campaign.load(root).manifest
    held = heldout_labels(root, m)
    shapes, listed = acceptance_shapes(m, held)
    assert listed == held and [s.label for s in shapes][-len(held) :] == held
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    sealed = heldout_path(root)
    text = sealed.read_text(encoding="utf-8")
    other = next(s.label for s in shape_set(m.shape_set) if s.label not in held)
    sealed.write_text(text.replace(held[0], other), encoding="utf-8")
    before[sealed] = sealed.read_bytes()
    with pytest.raises(AppendOnlyViolation, match="was changed"):
        heldout_labels(root, m)
    code, out = run_cli(accept, capsys)
    assert code == 5 and "was changed" in out and "restore" in out, out
    sealed.unlink()
    del before[sealed]
    code, out = run_cli(accept, capsys)
    assert code == 5 and "is missing" in out and "restore" in out, out
    after = {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name != ".lock"}
    assert after == {p: b for p, b in before.items() if p.name != ".lock"}


def test_a_digest_rewritten_with_its_file_is_caught_by_the_gate_ledger(
    slow_tiny: Path,
    tmp_path: Path,
    copy_campaign: Callable[[Path, Path, str], Path],
    capsys: pytest.CaptureFixture[str],
) -> None:
    root = copy_campaign(slow_tiny, tmp_path / "c", "t")
    m = Campaign.load(root).manifest
    held = heldout_labels(root, m)
    other = next(s.label for s in shape_set(m.shape_set) if s.label not in held)
    forged = Sealed.new([other], None)
    write_sealed(root, forged)
    text = (root / "manifest.yaml").read_text(encoding="utf-8")
    assert str(m.heldout_digest) in text
    (root / "manifest.yaml").write_text(text.replace(str(m.heldout_digest), forged.digest()))
    code, out = run_cli(["--campaigns-root", str(root.parent), "accept"], capsys)
    assert code == 5 and "heldout_digest" in out, out


def test_a_campaign_made_before_the_seal_reads_its_labels_and_says_unsealed(
    tmp_path: Path,
) -> None:
    old = manifest(heldout_shapes=["cpu-b", "cpu-c"], heldout_seed=3)
    assert heldout_labels(tmp_path, old) == ["cpu-b", "cpu-c"]
    assert "unsealed" in describe_heldout(old)
    with pytest.raises(ConfigError, match="sealed"):
        manifest(heldout_shapes=["cpu-b"], heldout_digest="sha256:" + "0" * 64, heldout_count=1)


@pytest.mark.skipif(not isolation_works(), reason="needs a mount namespace")
def test_a_hidden_folder_is_empty_to_an_isolated_process(tmp_path: Path) -> None:
    secret = tmp_path / "campaign" / "sealed"
    secret.mkdir(parents=True)
    (secret / "heldout.json").write_text("the labels\n", encoding="utf-8")
    read = ["sh", "-c", f"ls -A {secret}; cat {secret}/heldout.json; touch {secret}/x"]
    shown = subprocess.run(
        isolated_argv(read, [tmp_path / "campaign"], [], [secret]), capture_output=True, text=True
    )
    assert "the labels" not in shown.stdout and shown.returncode != 0, shown
    assert not (secret / "x").exists()
    plain = subprocess.run(
        isolated_argv(read, [tmp_path / "campaign"], [], []), capture_output=True, text=True
    )
    assert "the labels" in plain.stdout  # without ``hidden`` it is read
