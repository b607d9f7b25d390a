"""The docker reaper: ``python -m runner.executors.reaper NAME [rm|kill]``.

Started by the docker executor for each container, in its own session, with a pipe on
its stdin whose other end only the campaign process holds.  The campaign writes
``done`` when the job ended normally (the executor removes the container itself);
when the pipe closes without it, the campaign process died (``kill -9``): the
``docker start --attach`` client died with it but the container did not, so the reaper
removes it (``rm``, or only stops it with ``kill`` when containers are kept).  It holds
the GPU lease descriptors it inherited until then: a GPU is never free while a
container of the round still runs on it.
"""

from __future__ import annotations

import sys

from runner.core.processes import run


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2 or (len(args) == 2 and args[1] not in ("rm", "kill")):
        print("usage: python -m runner.executors.reaper CONTAINER [rm|kill]", file=sys.stderr)
        return 2
    name, how = args[0], (args[1] if len(args) == 2 else "rm")
    said = sys.stdin.read()  # blocks until the campaign closes the pipe (or dies)
    if said.strip() == "done":
        return 0
    if how == "kill":
        run(["docker", "kill", name], check=False, timeout=120)
    else:
        run(["docker", "rm", "--force", "--volumes", name], check=False, timeout=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
