"""Choosing the executor a campaign's manifest names."""

from __future__ import annotations

from runner.errors import ConfigError
from runner.executors.base import Executor
from runner.executors.local import LocalExecutor
from runner.manifest import Manifest


def make_executor(m: Manifest, override: str | None = None) -> Executor:
    kind = override or m.executor
    if kind == "local":
        return LocalExecutor()
    if kind == "docker":
        from runner.executors.docker import DockerExecutor

        if not m.image:
            raise ConfigError("the docker executor needs an image: campaign init --image TAG")
        return DockerExecutor(m.image, gpu=None, campaign=m.campaign_name)
    raise ConfigError(f"executor {kind!r} is not available; use local or docker")
