"""Append-only files: edits, truncations and rewrites are caught before appending."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runner.core.errors import AppendOnlyViolation
from runner.store.appendlog import (
    append,
    append_correction,
    ledger_path,
    read_ledger,
    verify,
    write_atomic,
)


@pytest.fixture
def log(tmp_path: Path) -> Path:
    path = tmp_path / "optimize.md"
    append(path, "# Log\n\n")
    append(path, "### round-1 — BASELINE\n")
    return path


def test_append_creates_file_and_ledger(log: Path) -> None:
    assert log.read_text() == "# Log\n\n### round-1 — BASELINE\n"
    entries = read_ledger(log)
    assert [e.length for e in entries] == [len(b"# Log\n\n"), len(log.read_bytes())]
    assert entries[-1].sha256 == hashlib.sha256(log.read_bytes()).hexdigest()
    verify(log)
    assert not list(log.parent.glob("*.tmp"))


def test_hand_edit_is_a_violation(log: Path) -> None:
    log.write_text(log.read_text().replace("BASELINE", "ACCEPTED"))
    with pytest.raises(AppendOnlyViolation) as info:
        append(log, "more\n")
    msg = str(info.value)
    assert str(log) in msg
    assert "edited or rewritten" in msg
    assert "first difference between byte 7 and byte" in msg
    assert "append a correction" in msg
    assert "more" not in log.read_text()


def test_truncation_is_a_violation(log: Path) -> None:
    data = log.read_bytes()
    log.write_bytes(data[:-5])
    with pytest.raises(AppendOnlyViolation, match=f"truncated from {len(data)} to"):
        append(log, "more\n")


def test_full_rewrite_of_same_length_is_a_violation(log: Path) -> None:
    log.write_bytes(b"x" * len(log.read_bytes()))
    with pytest.raises(AppendOnlyViolation, match="between byte 0 and byte 7"):
        verify(log)


def test_deleted_file_is_a_violation(log: Path) -> None:
    log.unlink()
    with pytest.raises(AppendOnlyViolation, match="was deleted"):
        append(log, "fresh start\n")


def test_missing_ledger_is_a_violation(log: Path) -> None:
    ledger_path(log).unlink()
    with pytest.raises(AppendOnlyViolation, match="no ledger"):
        append(log, "x\n")


def test_edited_ledger_is_a_violation(log: Path) -> None:
    ledger_path(log).write_text("garbage\n")
    with pytest.raises(AppendOnlyViolation, match="ledger"):
        verify(log)


def test_expected_prefix_gives_exact_offset(log: Path) -> None:
    with pytest.raises(AppendOnlyViolation, match="at byte 2"):
        append(log, "x\n", expected_prefix="# Journal\n")
    append(log, "x\n", expected_prefix="# Log\n")


def test_interrupted_before_ledger_update_still_verifies(log: Path) -> None:
    # the rename happened, the ledger update did not: the ledger is a prefix
    write_atomic(log, log.read_bytes() + b"half-recorded\n")
    verify(log)
    append(log, "next\n")
    verify(log)
    assert log.read_text().endswith("half-recorded\nnext\n")


def test_correction_is_marked_and_keeps_the_entry(log: Path) -> None:
    before = log.read_text()
    append_correction(log, "round-1 was FULL, not quick\nsecond line", when="2026-11-29 15:00")
    text = log.read_text()
    assert text.startswith(before)
    assert "> **CORRECTION (2026-11-29 15:00)**" in text
    assert "> round-1 was FULL, not quick\n> second line\n" in text
    verify(log)


def test_verify_does_not_write(log: Path) -> None:
    before = (log.read_bytes(), ledger_path(log).read_bytes())
    verify(log)
    assert (log.read_bytes(), ledger_path(log).read_bytes()) == before


@settings(max_examples=40, deadline=None)
@given(
    chunks=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=6),
    data=st.data(),
)
def test_any_change_to_written_bytes_is_caught(
    tmp_path_factory: pytest.TempPathFactory, chunks: list[str], data: st.DataObject
) -> None:
    path = tmp_path_factory.mktemp("log") / "trend.md"
    for c in chunks:
        append(path, c)
    verify(path)
    raw = bytearray(path.read_bytes())
    i = data.draw(st.integers(0, len(raw) - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    path.write_bytes(bytes(raw))
    with pytest.raises(AppendOnlyViolation):
        verify(path)
