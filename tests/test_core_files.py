"""runner.core.files: the one atomic writer."""

from __future__ import annotations

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
    from runner.core.errors import ConfigError
    from runner.core.versions import require_schema_version

    def check(found: object) -> None:
        require_schema_version(found, 2, "x.json", older="OLD-FIX", newer="NEW-FIX")

    check(2)
    with pytest.raises(ConfigError, match=r"x.json: schema_version 1 is older .*OLD-FIX"):
        check(1)
    with pytest.raises(ConfigError, match=r"schema_version 3 is newer .*NEW-FIX"):
        check(3)
    for bad in (None, "2", True, 2.0):
        with pytest.raises(ConfigError, match="is not the integer 2"):
            check(bad)
    with pytest.raises(ValueError, match=r"^schema_version 1 is older"):
        require_schema_version(1, 2, "", older="o", newer="n", error=ValueError)
