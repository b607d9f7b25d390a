"""The target registry: names to adapters; unknown names fail with the valid ones."""

from __future__ import annotations

from typing import Protocol

from runner.core.errors import ConfigError
from runner.targets.base import Target
from runner.targets.example import EXAMPLE
from runner.targets.primus_turbo import PRIMUS_TURBO

TARGETS: dict[str, Target] = {t.name: t for t in (EXAMPLE, PRIMUS_TURBO)}


class CampaignFacts(Protocol):
    """What ``manifest_target`` reads of a campaign's manifest
    (``runner.store.manifest.Manifest``)."""

    @property
    def target(self) -> str: ...
    @property
    def execution_mode(self) -> str: ...
    @property
    def target_op(self) -> str: ...
    @property
    def granularity(self) -> str | None: ...
    @property
    def target_backend(self) -> str: ...


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        valid = ", ".join(sorted(TARGETS))
        raise ConfigError(f"unknown target {name!r}; choose one of: {valid}") from None


def campaign_target(name: str, mode: str, op: str, granularity: str | None, backend: str) -> Target:
    """The target a campaign runs: ``get_target(name)``, in workspace mode its variant
    for the minimal stack (``Target.for_workspace``)."""
    target = get_target(name)
    return target.for_workspace(op, granularity, backend) if mode == "workspace" else target


def manifest_target(m: CampaignFacts) -> Target:
    """``campaign_target`` for a campaign's manifest."""
    return campaign_target(m.target, m.execution_mode, m.target_op, m.granularity, m.target_backend)
