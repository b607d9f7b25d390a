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
        """The campaigns root: the option, else $CAMPAIGN_ROOT, else ./campaigns; a
        leading ``~`` is the home folder, as a shell would expand it (a quoted
        ``CAMPAIGN_ROOT='~/x'`` made a folder named ``~``)."""
        root = campaigns_root or os.environ.get(CAMPAIGNS_ROOT_ENV) or "campaigns"
        return cls(campaigns_root=Path(root).expanduser().resolve())
