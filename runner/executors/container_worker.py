"""A serving worker in a container (``DockerExecutor.start_worker``).

The host talks to it through the ``docker start --attach --interactive`` client, whose
stdin/stdout carry the worker protocol; so the host cannot stop it with a signal to
that client's process group as it stops a local worker.  Instead:

* ``pause``/``resume``: ``docker pause``/``unpause`` freeze and thaw the container's
  cgroup, so every process in it stops during another worker's timed turn, one the
  worker detached included (a double fork cannot leave a container's cgroup);
* ``cpu_clock``: the container's cgroup is the worker's own (``ContainerCgroup``: the
  unified hierarchy's ``cpu.stat``, else cgroup v1's ``cpuacct.usage``), and its worker
  process is the first child of the container's init (``--init``: a process the worker
  detaches is handed to that init too, later); CPU time the cgroup used beyond that
  process's tree ran beside the timing (``runner.core.cgroup``);
* ``release``: the container removed (or kept, as a job's is) and its reaper told.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from runner.core import processes as cmd
from runner.core.cgroup import ContainerCgroup, ForeignClock, first_child
from runner.core.errors import InfrastructureError
from runner.executors.base import LiveWorker

# why the cgroup CPU guard reads nothing for a container worker
NO_CONTAINER_CGROUP = "the host reads no CPU time of the container's cgroup"
NO_CONTAINER_PID = "the container's worker process was not found on the host"


def _found(clock: tuple[ContainerCgroup, int] | str) -> tuple[ForeignClock | None, str]:
    if isinstance(clock, str):
        return None, clock
    return ForeignClock(*clock), ""


@dataclass
class ContainerWorker(LiveWorker):
    """A ``LiveWorker`` whose process is the ``docker start`` client of ``container``."""

    container: str = ""
    # removes (or keeps) the container and tells its reaper; run once, by ``release``
    on_end: Callable[[], None] | None = None
    # the container's cgroup and worker pid, or why there are none, once looked up
    _clock: tuple[ContainerCgroup, int] | str | None = field(default=None, repr=False)

    def cpu_clock(self) -> tuple[ForeignClock | None, str]:
        if self._clock is None:
            self._clock = self._look_up()
        return _found(self._clock)

    def _look_up(self) -> tuple[ContainerCgroup, int] | str:
        state = cmd.run(
            ["docker", "inspect", "--format", "{{.State.Pid}}", self.container], check=False
        )
        init = (state.stdout or "").strip()
        if state.returncode != 0 or not init.isdigit() or init == "0":
            return NO_CONTAINER_PID
        group = ContainerCgroup.of_pid(int(init))
        if group is None:
            return NO_CONTAINER_CGROUP
        worker = first_child(int(init))
        if worker is None:
            return NO_CONTAINER_PID
        return group, worker

    def pause(self) -> bool:
        if self.proc is None or self.proc.poll() is not None:
            return False
        done = cmd.run(["docker", "pause", self.container], check=False)
        said = (done.stdout or "").strip()
        if done.returncode == 0:
            return True
        if "is not running" in said:  # it ended: the host finds out from its pipe
            return False
        raise InfrastructureError(
            f"docker pause {self.container} failed: {said}\nThe other role's worker must "
            "be stopped while one takes a timed turn; docker pauses a container through "
            "its cgroup's freezer (check `docker info` for the cgroup driver and version)."
        )

    def resume(self) -> None:
        cmd.run(["docker", "unpause", self.container], check=False)

    def release(self) -> None:
        super().release()
        end, self.on_end = self.on_end, None
        if end is not None:
            end()
