"""runner.core.files: the one atomic writer."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from runner.core.files import write_atomic, write_json_atomic


def test_text_is_written_byte_for_byte(tmp_path: Path) -> None:
    path = tmp_path / "new" / "a.csv"
    write_atomic(path, "a,b\r\n1,2\n")
    assert path.read_bytes() == b"a,b\r\n1,2\n"
    write_atomic(path, b"\x00\x01")
    assert path.read_bytes() == b"\x00\x01"
    assert [p.name for p in path.parent.iterdir()] == ["a.csv"]


def test_json_keeps_key_order(tmp_path: Path) -> None:
    path = tmp_path / "spec.json"
    write_json_atomic(path, {"z": 1, "a": [1, 2]})
    text = path.read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.index('"z"') < text.index('"a"')
    assert json.loads(text) == {"z": 1, "a": [1, 2]}


def test_a_failed_write_keeps_the_old_file_and_no_temp(tmp_path: Path) -> None:
    path = tmp_path / "keep.txt"
    write_atomic(path, "old\n")
    with pytest.raises(TypeError):
        write_atomic(path, 42)  # type: ignore[arg-type]
    assert path.read_text(encoding="utf-8") == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_minute_stamps() -> None:
    from runner.core.timestamps import is_minute_stamp, now_minute

    assert is_minute_stamp(now_minute())
    assert is_minute_stamp("2026-11-30 09:05")
    for bad in ("2026-11-30 9:05", "2026-11-30 09:05:00", "2026-02-30 09:05", "", "x"):
        assert not is_minute_stamp(bad), bad


def test_schema_version_check_says_which_way_and_the_fix() -> None:
    from runner.core.errors import ConfigError, RecordDamaged
    from runner.core.versions import require_schema_version

    def check(found: object) -> None:
        require_schema_version(found, 2, "x.json", older="OLD-FIX", newer="NEW-FIX")

    check(2)
    with pytest.raises(RecordDamaged, match=r"x.json: schema_version 1 is older .*OLD-FIX"):
        check(1)
    with pytest.raises(RecordDamaged, match=r"schema_version 3 is newer .*NEW-FIX"):
        check(3)
    for bad in (None, "2", True, 2.0):
        with pytest.raises(ConfigError, match="is not the integer 2"):
            check(bad)
    with pytest.raises(ValueError, match=r"^schema_version 1 is older"):
        require_schema_version(1, 2, "", older="o", newer="n", error=ValueError)


RUNNER = Path(__file__).resolve().parent.parent / "runner"


def direct_writes(root: Path) -> list[str]:
    """``path:line`` of every ``.write_text(`` / ``.write_bytes(`` call under ``root``
    (code only: a generated script's text is a string, not a call)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("write_text", "write_bytes")
            ):
                found.append(f"{path.relative_to(root.parent)}:{node.lineno}")
    return found


def test_every_file_of_the_runner_goes_through_the_one_writer(tmp_path: Path) -> None:
    """docs/architecture.md §5: no file is written with ``Path.write_text`` (a reader could
    see half of it); ``write_atomic``/``write_json_atomic`` write it."""
    assert direct_writes(RUNNER) == [], "write it with runner.core.files.write_atomic"
    (tmp_path / "runner").mkdir()
    (tmp_path / "runner" / "x.py").write_text(
        'SCRIPT = "p.write_text(t)"\n\ndef f(p):\n    p.write_bytes(b"")\n'
    )
    assert direct_writes(tmp_path / "runner") == ["runner/x.py:4"]


def test_a_records_copy_takes_plain_files_only(tmp_path: Path) -> None:
    """``copy_plain_tree``: a pass folder is written by the candidate's code; a link in
    it (to a file, to a folder) would pull host files into the records, a FIFO would
    hang the copy.  Plain files and folders are copied and merged; the rest is left."""
    import os

    from runner.core.files import copy_plain_tree

    secret = tmp_path / "host" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("not for the records")
    src = tmp_path / "pass-02-candidate"
    (src / "sub").mkdir(parents=True)
    (src / "benchmark.csv").write_text("a,b\n1,2\n")
    (src / "sub" / "log.txt").write_text("log")
    (src / "leak.txt").symlink_to(secret)
    (src / "sub" / "host").symlink_to(secret.parent, target_is_directory=True)
    (src / "zero").symlink_to("/dev/zero")
    os.mkfifo(src / "pipe")
    dest = tmp_path / "records" / "pass-02-candidate"
    dest.mkdir(parents=True)
    (dest / "kept.txt").write_text("earlier")
    copy_plain_tree(src, dest)
    got = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert got == ["benchmark.csv", "kept.txt", "sub", "sub/log.txt"]
    assert (dest / "benchmark.csv").read_text() == "a,b\n1,2\n"
    linked = tmp_path / "linked"
    linked.symlink_to(src, target_is_directory=True)
    copy_plain_tree(linked, tmp_path / "from-a-link")  # a linked folder itself: nothing
    assert not (tmp_path / "from-a-link").exists()
