"""Other roles' trees read-only to a local worker's processes (docs/reliability.md §7).

Each local job runs in a private mount namespace (``unshare --mount``; as a user that
is not root, inside a user namespace that maps it to root) in which the paths the job
must not write (the other roles' worktrees, the round's scratch folder, the campaign
folder, the source repository, the harness and its root, the interpreter's prefix:
``interpreter_roots``) are bind-mounted read-only over
themselves and the job's own artifacts folder writable again; the campaign's sealed
folder (the held-out pick, ``runner.store.sealed``) is covered by an empty read-only
file system, so no job of any role reads it.  Nothing outside the
process changes.  Where namespaces do not work (a container without the privilege, a
kernel without them) or ``TURBO_CAMPAIGN_ISOLATION=off``, jobs run as before and the
end-of-round proof (``runner.round.tamper_check``) still fails a round whose files
changed.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from runner.core.errors import CampaignError
from runner.core.processes import run

ISOLATION_ENV = "TURBO_CAMPAIGN_ISOLATION"  # "off": no mount namespace


def _unshare() -> list[str]:
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    return ["unshare", *user, "--mount", "--propagation", "private"]


PROBE = "mount --bind / / && mount -o remount,bind,ro / /"


@functools.cache
def isolation_works() -> bool:
    """Whether this host can run a job in a private mount namespace with a read-only
    bind mount (probed once per process)."""
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    try:
        proc = run([*_unshare(), "sh", "-c", PROBE], check=False, timeout=30)
    except (OSError, CampaignError):
        return False
    return proc.returncode == 0


def mount_script(
    readonly: Sequence[Path], writable: Sequence[Path] = (), hidden: Sequence[Path] = ()
) -> str:
    """The ``sh`` script, run inside the new namespace, that makes each existing path of
    ``readonly`` read-only and each of ``writable`` writable again, mounts an empty
    read-only file system over each existing folder of ``hidden`` (its files unseen:
    the sealed held-out pick, ``runner.store.sealed``), then runs its arguments
    (``exec "$@"``); a mount that fails exits 97 saying how to run without."""
    lines = []
    for paths, mode in ((readonly, "ro"), (writable, "rw"), (hidden, "hidden")):
        for path in dict.fromkeys(Path(p).resolve() for p in paths if Path(p).exists()):
            q = shlex.quote(str(path))
            why = shlex.quote(
                f"isolation: could not mount {path} {mode} in the job's mount "
                f"namespace; set {ISOLATION_ENV}=off to run without it"
            )
            # --rbind: a plain bind of a prefix such as /usr hides the mounts below it
            # (a GPU host's driver libraries are bind-mounted there: CUDA then finds no
            # driver); only the top mount is made read-only
            mount = (
                f"mount -t tmpfs -o ro,size=4k,mode=0500 turbo-campaign-hidden {q}"
                if mode == "hidden"
                else f"mount --rbind {q} {q} && mount -o remount,bind,{mode} {q} {q}"
            )
            lines.append(f"{{ {mount}; }} || {{ echo {why} >&2; exit 97; }}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def isolated_argv(
    argv: Sequence[str],
    readonly: Sequence[Path],
    writable: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
) -> list[str]:
    """``argv`` run in a private mount namespace where each existing path of
    ``readonly`` is read-only, each of ``writable`` (e.g. a folder inside one of
    them) writable and each folder of ``hidden`` empty."""
    script = mount_script(readonly, writable, hidden)
    return [*_unshare(), "sh", "-c", script, "isolated", *argv]


def interpreter_roots() -> tuple[Path, ...]:
    """What every job's interpreter imports from before the job's own paths, read-only
    to a job (a build's commands aside: an install writes into the prefix): the harness
    root (the folder holding the ``runner`` package, first on every worker's
    ``sys.path``: a ``torch.py`` written there would shadow the real one in every later
    worker) and the interpreter's prefixes (its standard library and site-packages)."""
    import runner

    harness_root = Path(runner.__file__).resolve().parent.parent
    roots = (harness_root, Path(sys.prefix), Path(sys.base_prefix))
    return tuple(dict.fromkeys(p.resolve() for p in roots))


def _off() -> bool:
    return os.environ.get(ISOLATION_ENV, "").strip().lower() == "off"


def protect(
    argv: Sequence[str],
    readonly: Sequence[Path],
    writable: Sequence[Path],
    hidden: Sequence[Path] = (),
) -> list[str]:
    """``argv`` isolated when there is something to protect and the host can
    (``isolation_works``), unless ``TURBO_CAMPAIGN_ISOLATION=off``; else unchanged."""
    if not (readonly or hidden) or _off():
        return list(argv)
    if not isolation_works():
        return list(argv)
    return isolated_argv(argv, readonly, writable, hidden)


def shell_prefix(
    readonly: Sequence[Path], writable: Sequence[Path], hidden: Sequence[Path] = ()
) -> list[str]:
    """For a script that runs on another machine (a Slurm task): bash lines that set
    the array ``iso`` to the namespace prefix when that machine can make one (the probe
    of ``isolation_works``, run there, as its user) and leave it empty otherwise; the
    script then runs ``"${iso[@]}" CMD``.  Empty too when there is nothing to protect
    or ``TURBO_CAMPAIGN_ISOLATION=off`` here."""
    if not (readonly or hidden) or _off():
        return ["iso=()"]
    user = 'u=(); [ "$(id -u)" = 0 ] || u=(--user --map-root-user)'
    ns = 'unshare "${u[@]}" --mount --propagation private'
    script = shlex.quote(mount_script(readonly, writable, hidden))
    return [
        "iso=()",
        user,
        f"if command -v unshare >/dev/null && command -v mount >/dev/null && "
        f"{ns} sh -c {shlex.quote(PROBE)} 2>/dev/null; then",
        f"  iso=({ns} sh -c {script} isolated)",
        "else",
        "  echo 'isolation: no mount namespace on this node; the round relies on its "
        "proof (docs/reliability.md §7)'",
        "fi",
    ]
