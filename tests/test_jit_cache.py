"""The roles' JIT cache folders are bounded (docs/reliability.md §7, row 18): beyond
the limit the least recently used go first, through the build cache's one LRU rule
(``runner.executors.lru``), and never a folder a running round claimed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from runner.core.errors import ConfigError
from runner.executors.jit_cache import LIMIT_ENV, claim, limit_bytes, prune, role_folder

MIB = 1 << 20


def _folder(root: Path, role: str, key: str, mib: int, used: float) -> Path:
    """A role's cache folder with ``mib`` MiB of compiled kernels, last used at ``used``."""
    folder = role_folder(root, role, key)
    (folder / "triton" / key).mkdir(parents=True)
    (folder / "triton" / key / "kernel.cubin").write_bytes(os.urandom(mib * MIB))
    os.utime(folder, (used, used))
    return folder


def test_the_least_recently_used_unclaimed_folders_go_beyond_the_limit(tmp_path: Path) -> None:
    root = tmp_path / ".jit-cache"
    oldest = _folder(root, "incumbent", "a" * 16, 3, 1_000_000)
    middle = _folder(root, "candidate", "b" * 16, 2, 2_000_000)
    newest = _folder(root, "candidate", "c" * 16, 1, 3_000_000)
    running = tmp_path / "round-scratch"  # a running round's scratch folder
    running.mkdir()
    claim(root, oldest, running)  # the round uses the oldest folder (and it is not newer)
    os.utime(oldest, (1_000_000, 1_000_000))
    assert prune(root, limit=6 * MIB) == []  # within the limit: nothing goes
    assert prune(root, limit=int(3.5 * MIB)) == [middle.name, newest.name]
    assert oldest.is_dir() and not middle.exists() and not newest.exists()
    assert prune(root, limit=0) == []  # claimed: kept whatever it costs
    shutil.rmtree(running)  # the round ended: its claim lapses
    assert prune(root, limit=0) == [oldest.name] and not oldest.exists()
    assert list((root / ".claims").iterdir()) == []


def test_a_claim_marks_the_folder_as_just_used(tmp_path: Path) -> None:
    root = tmp_path / ".jit-cache"
    older = _folder(root, "incumbent", "a" * 16, 1, 1_000_000)
    newer = _folder(root, "candidate", "b" * 16, 1, 2_000_000)
    gone = tmp_path / "ended"  # a claim by a round whose scratch folder is gone
    gone.mkdir()
    claim(root, older, gone)
    shutil.rmtree(gone)
    assert prune(root, limit=int(1.5 * MIB)) == [newer.name]
    assert older.is_dir()


def test_the_limit_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LIMIT_ENV, raising=False)
    assert limit_bytes() == 20 << 30
    monkeypatch.setenv(LIMIT_ENV, "0.5")
    assert limit_bytes() == 512 * MIB
    monkeypatch.setenv(LIMIT_ENV, "lots")
    with pytest.raises(ConfigError, match=LIMIT_ENV):
        limit_bytes()


def test_a_round_claims_its_folder_and_prunes_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from campaign_helpers import tiny_campaign

    from runner.executors.factory import make_executor
    from runner.executors.jit_cache import jit_root
    from runner.round.context import RoundPlan

    camp = tiny_campaign(tmp_path, "jit", baseline=False)
    root = jit_root(camp.root.parent)
    stale = _folder(root, "candidate", "d" * 16, 1, 1_000_000)
    monkeypatch.setenv(LIMIT_ENV, "0")  # keep nothing a round does not use
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rnd = RoundPlan(camp, make_executor(camp.manifest), lambda _m: None, scratch, 2, "quick", ())
    mine = rnd.jit_folder("incumbent", Path(camp.manifest.source))
    mine.mkdir(parents=True)
    (mine / "kernel.bin").write_bytes(b"x" * MIB)
    assert not stale.exists()
    assert prune(root) == [] and mine.is_dir()  # claimed while the round runs


def test_a_new_folder_starts_as_a_copy_of_the_lineage_s_newest_folders(tmp_path: Path) -> None:
    """A candidate's (or a new head's) folder starts with what the lineage's roles
    compiled, newest first; a candidate's folder is never copied, and a copy is a
    copy: what the new folder's job writes does not reach the folder it came from."""
    from runner.executors.jit_cache import SEED_FOLDERS, seed

    root = tmp_path / ".jit-cache"
    base = _folder(root, "baseline", "a" * 16, 1, 1_000_000)
    (base / "triton" / "test-kernel").mkdir()
    (base / "triton" / "test-kernel" / "k.cubin").write_bytes(b"baseline")
    inc = _folder(root, "incumbent", "a" * 16, 1, 2_000_000)
    (inc / "triton" / "test-kernel").mkdir()
    (inc / "triton" / "test-kernel" / "k.cubin").write_bytes(b"incumbent")
    planted = _folder(root, "candidate-2", "c" * 16, 1, 3_000_000)  # newest, untrusted
    (planted / "triton" / "evil").mkdir()
    new = role_folder(root, "candidate-1", "d" * 16)
    assert seed(root, new) == [inc.name, base.name]
    assert sorted(p.name for p in (new / "triton").iterdir()) == ["a" * 16, "test-kernel"]
    assert (new / "triton" / "test-kernel" / "k.cubin").read_bytes() == b"incumbent"
    assert not (new / "triton" / "evil").exists()
    copied = new / "triton" / "test-kernel" / "k.cubin"
    assert copied.stat().st_ino != (inc / "triton" / "test-kernel" / "k.cubin").stat().st_ino
    copied.write_bytes(b"rewritten by the candidate's job")
    assert (inc / "triton" / "test-kernel" / "k.cubin").read_bytes() == b"incumbent"
    assert seed(root, new) == []  # an existing folder is the role's own: left alone
    assert (new / "triton" / "test-kernel" / "k.cubin").read_bytes().startswith(b"rewritten")
    for k in range(SEED_FOLDERS + 1):  # only the newest SEED_FOLDERS are copied
        _folder(root, "final", f"{k:016d}", 0, 4_000_000 + k)
    assert len(seed(root, role_folder(root, "incumbent", "e" * 16))) == SEED_FOLDERS
    assert not any(p.name.startswith(".seeding") for p in root.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    alone = role_folder(empty, "candidate", "f" * 16)
    assert seed(empty, alone) == [] and not alone.exists()  # nothing to copy: made later


def test_a_round_s_candidate_folder_starts_with_the_incumbent_s_kernels(
    tmp_path: Path,
) -> None:
    from campaign_helpers import tiny_campaign

    from runner.executors.factory import make_executor
    from runner.executors.jit_cache import jit_root
    from runner.round.context import RoundPlan

    camp = tiny_campaign(tmp_path, "jitseed", baseline=False)
    source = Path(camp.manifest.source)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rnd = RoundPlan(camp, make_executor(camp.manifest), lambda _m: None, scratch, 2, "quick", ())
    inc = rnd.jit_folder("incumbent", source)
    (inc / "triton" / "k").mkdir(parents=True)
    (inc / "triton" / "k" / "gemm.cubin").write_bytes(b"compiled by the head")
    cand_tree = tmp_path / "cand"
    shutil.copytree(source, cand_tree)
    (cand_tree / "change.txt").write_text("a candidate's change\n")
    cand = rnd.jit_folder("candidate", cand_tree)
    assert cand != inc and cand.parent == jit_root(camp.root.parent)
    assert (cand / "triton" / "k" / "gemm.cubin").read_bytes() == b"compiled by the head"
