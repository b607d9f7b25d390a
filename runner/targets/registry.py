"""The target registry: names to adapters; unknown names fail with the valid ones."""

from __future__ import annotations

from runner.core.errors import ConfigError
from runner.targets.base import Target
from runner.targets.example import EXAMPLE
from runner.targets.primus_turbo import PRIMUS_TURBO

TARGETS: dict[str, Target] = {t.name: t for t in (EXAMPLE, PRIMUS_TURBO)}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        valid = ", ".join(sorted(TARGETS))
        raise ConfigError(f"unknown target {name!r}; choose one of: {valid}") from None
