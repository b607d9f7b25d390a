"""Where the record of ``campaign accept`` lives (``acceptance/``) and how it is read
back, for ``campaign status`` and the report; ``runner.flow.acceptance_record`` makes
and writes it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from runner.core.errors import ConfigError
from runner.core.versions import require_schema_version
from runner.store.campaign import Campaign

ACCEPTANCE_SCHEMA_VERSION = 1


def acceptance_dir(campaign: Campaign) -> Path:
    return campaign.root / "acceptance"


def load_acceptance(campaign: Campaign) -> dict[str, Any] | None:
    """``acceptance/acceptance.json`` as a dict, or None when acceptance never ran."""
    path = acceptance_dir(campaign) / "acceptance.json"
    try:
        data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"{path} is not valid JSON ({exc}); run `campaign accept` again"
        ) from None
    require_schema_version(
        data.get("schema_version"),
        ACCEPTANCE_SCHEMA_VERSION,
        str(path),
        older="run `campaign accept` again",
        newer="upgrade turbo-campaign (pip install -U turbo-campaign) to read it, or run "
        "`campaign accept` again",
    )
    return data
