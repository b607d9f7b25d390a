"""A manifest in upstream's shape, imported by ``campaign init --from-manifest FILE``.

The skill page of Primus-Turbo's ``agent/skills/kernel-optimize/`` (PREPARE_ENVIRONMENT, Step 3;
checked at a6a16cdc) writes ``agent/workspace/<campaign_name>/manifest.yaml`` with the
fields of ``runner.store.manifest.SECTION2_FIELDS``.  It lacks what a campaign here needs
besides (the source checkout, the campaign name, the shape set), so it is not a campaign
manifest: ``init`` reads it as its options instead, the command line's explicit options
winning.  Upstream's
spellings are read as ``runner.store.manifest`` reads them (``target_op`` op +
granularity, ``repo-mode``, one ``kernel_source`` path, a share-of-peak target).
``quick_command`` is left out: the campaign's own quick script has its own path.  An
unknown field, or one still holding the template's ``<placeholder>``, is an error that
names it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from runner.core.errors import ConfigError
from runner.store.manifest import SECTION2_FIELDS, upstream_spellings

NOT_IMPORTED = ("quick_command",)
# The project skill of each target (upstream's `project_skill`, a6a16cdc).
PROJECT_SKILLS = {"primus-turbo": "primus-turbo-develop"}


def target_of_skill(skill: str | None) -> str | None:
    """The target whose project skill is ``skill`` (None when no target has it)."""
    return next((t for t, s in PROJECT_SKILLS.items() if s == skill), None)


def _load(path: Path) -> dict[str, object]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"--from-manifest {path}: cannot read it ({exc}); pass the manifest.yaml that "
            "upstream's kernel-optimize skill page wrote"
        ) from None
    try:
        data = yaml.safe_load(text)
    except (yaml.YAMLError, RecursionError) as exc:
        raise ConfigError(f"--from-manifest {path}: not valid YAML ({exc}); fix it") from None
    if not isinstance(data, dict):
        raise ConfigError(f"--from-manifest {path}: expected a YAML mapping of fields")
    return data


def _placeholder(value: object) -> bool:
    return isinstance(value, str) and value.strip().startswith("<") and value.strip().endswith(">")


def read_upstream_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The campaign fields ``path`` gives (manifest names, upstream's spellings read);
    a null field is left to its default.  ConfigError names unknown fields and fields
    still holding a template placeholder."""
    p = Path(path)
    data = _load(p)
    known = (*SECTION2_FIELDS, "granularity")  # granularity is ours, accepted beside
    unknown = sorted(str(k) for k in data if k not in known)
    if unknown:
        raise ConfigError(
            f"--from-manifest {p}: unknown field(s) {', '.join(unknown)}; remove them "
            f"(upstream's manifest fields: {', '.join(SECTION2_FIELDS)})"
        )
    unfilled = sorted(str(k) for k, v in data.items() if _placeholder(v))
    if unfilled:
        raise ConfigError(
            f"--from-manifest {p}: {', '.join(unfilled)} still hold the template's "
            "<placeholder>; fill them in or remove them"
        )
    given = {k: v for k, v in data.items() if v is not None and k not in NOT_IMPORTED}
    if given.get("representative_shapes") == []:
        del given["representative_shapes"]  # chosen at BASELINE
    try:
        return upstream_spellings(given)
    except ValueError as exc:
        raise ConfigError(f"--from-manifest {p}: {exc}") from None
