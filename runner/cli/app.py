"""The application object every command receives in ``ctx.obj``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CAMPAIGNS_ROOT_ENV = "CAMPAIGN_ROOT"


@dataclass
class App:
    campaigns_root: Path

    @classmethod
    def from_env(cls, campaigns_root: str | None) -> App:
        root = campaigns_root or os.environ.get(CAMPAIGNS_ROOT_ENV) or "campaigns"
        return cls(campaigns_root=Path(root).resolve())
