"""Choosing the executor a campaign's manifest names."""

from __future__ import annotations

from runner.core.errors import ConfigError
from runner.executors.base import Executor
from runner.executors.local import LocalExecutor
from runner.store.manifest import Manifest


def make_executor(m: Manifest, override: str | None = None) -> Executor:
    kind = override or m.executor
    if kind == "local":
        return LocalExecutor()
    if kind == "docker":
        from runner.executors.docker import DockerExecutor

        if not m.image:
            raise ConfigError("the docker executor needs an image: campaign init --image TAG")
        # The image recorded at init, by id: what runs is what the manifest names.
        # No fixed GpuRequest: each job gets the GPU leased to it (WorkerJob.gpus),
        # numbered 0 inside its container.
        return DockerExecutor(m.image_id or m.image, gpu=None, campaign=m.campaign_name)
    if kind == "slurm":
        from runner.executors.slurm import SlurmExecutor

        # Each task runs the same worker (inside the image when one is named); the
        # round's temporary folder must be on a filesystem the compute nodes share
        # (on a one-node cluster, as in the tests, it always is).
        return SlurmExecutor(image=m.image)
    raise ConfigError(f"executor {kind!r} is not available; use local, docker or slurm")
