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
    from runner.flow.round_context import Round

    camp = tiny_campaign(tmp_path, "jit", baseline=False)
    root = jit_root(camp.root.parent)
    stale = _folder(root, "candidate", "d" * 16, 1, 1_000_000)
    monkeypatch.setenv(LIMIT_ENV, "0")  # keep nothing a round does not use
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    rnd = Round(camp, make_executor(camp.manifest), lambda _m: None, scratch, 2, "quick", ())
    mine = rnd.jit_folder("incumbent", Path(camp.manifest.source))
    mine.mkdir(parents=True)
    (mine / "kernel.bin").write_bytes(b"x" * MIB)
    assert not stale.exists()
    assert prune(root) == [] and mine.is_dir()  # claimed while the round runs
