"""The one timestamp format of every record: local time to the minute
(``YYYY-MM-DD HH:MM``, docs/protocol.md §2.1)."""

from __future__ import annotations

import datetime as dt

MINUTE_FORMAT = "%Y-%m-%d %H:%M"


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
