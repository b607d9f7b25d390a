"""The timestamp formats: every record's, local time to the minute
(``YYYY-MM-DD HH:MM``, docs/protocol.md §2.1); a second-resolution form for progress
records (``at`` of an unfinished round); and a compact one for file and folder names."""

from __future__ import annotations

import datetime as dt

MINUTE_FORMAT = "%Y-%m-%d %H:%M"
SECOND_FORMAT = "%Y-%m-%d %H:%M:%S"
NAME_FORMAT = "%Y%m%d-%H%M%S"


def now_minute() -> str:
    """Now, local time, to the minute."""
    return dt.datetime.now().strftime(MINUTE_FORMAT)


def is_minute_stamp(text: str) -> bool:
    """Whether ``text`` is exactly a valid ``YYYY-MM-DD HH:MM`` timestamp."""
    try:
        parsed = dt.datetime.strptime(text, MINUTE_FORMAT)
    except ValueError:
        return False
    return parsed.strftime(MINUTE_FORMAT) == text


def now_second() -> str:
    """Now, local time, to the second (progress records)."""
    return dt.datetime.now().strftime(SECOND_FORMAT)


def name_stamp() -> str:
    """Now, local time, compact, for a file or folder name (``20261130-161600``)."""
    return dt.datetime.now().strftime(NAME_FORMAT)
