"""The one check of a record's ``schema_version`` (every YAML/JSON file the runner
writes carries one): exactly the version this release reads, or an error that says
which way the file is off and what to do."""

from __future__ import annotations

from runner.core.errors import RecordDamaged


def require_schema_version(
    found: object,
    supported: int,
    where: str,
    *,
    older: str,
    newer: str,
    error: type[Exception] = RecordDamaged,
) -> None:
    """Raise ``error`` unless ``found`` is the integer ``supported``.

    ``where`` names the file (may be empty); ``older`` is the fix for a file written by
    an older release or by something else (no integer version), ``newer`` the fix for
    one written by a newer release."""
    prefix = f"{where}: " if where else ""
    if not isinstance(found, int) or isinstance(found, bool):
        raise error(
            f"{prefix}schema_version {found!r} is not the integer {supported} this "
            f"turbo-campaign reads; {older}"
        )
    if found < supported:
        raise error(
            f"{prefix}schema_version {found} is older than {supported}, which this "
            f"turbo-campaign reads; {older}"
        )
    if found > supported:
        raise error(
            f"{prefix}schema_version {found} is newer than {supported}, which this "
            f"turbo-campaign reads; {newer}"
        )
