"""The executors by name, and the one a campaign's manifest names.

Each entry builds its executor from the manifest; a new executor is one function and one
line in ``EXECUTORS`` (its module is imported only when it is chosen, so the local
executor never needs the docker SDK)."""

from __future__ import annotations

from collections.abc import Callable

from runner.core.errors import ConfigError
from runner.executors.base import Executor
from runner.store.manifest import Manifest


def _local(m: Manifest) -> Executor:
    from runner.executors.local import LocalExecutor

    return LocalExecutor()


def _docker(m: Manifest) -> Executor:
    from runner.executors.docker import DockerExecutor

    if not m.image:
        raise ConfigError("the docker executor needs an image: campaign init --image TAG")
    # The image recorded at init, by id: what runs is what the manifest names.  No fixed
    # GpuRequest: each job gets the GPU leased to it (WorkerJob.gpus), numbered 0 inside
    # its container.
    return DockerExecutor(m.image_id or m.image, gpu=None, campaign=m.campaign_name)


def _slurm(m: Manifest) -> Executor:
    from runner.executors.slurm import SlurmExecutor

    # Each task runs the same worker (inside the image when one is named); the round's
    # temporary folder must be on a filesystem the compute nodes share (on a one-node
    # cluster, as in the tests, it always is).
    return SlurmExecutor(image=m.image, campaign=m.campaign_name)


EXECUTORS: dict[str, Callable[[Manifest], Executor]] = {
    "local": _local,
    "docker": _docker,
    "slurm": _slurm,
}


def make_executor(m: Manifest, override: str | None = None) -> Executor:
    kind = override or m.executor
    build = EXECUTORS.get(kind)
    if build is None:
        raise ConfigError(
            f"executor {kind!r} is not available; use one of {', '.join(sorted(EXECUTORS))}"
        )
    return build(m)
