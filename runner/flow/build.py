"""Building the trees under test of a target with native code, once per role per round.

A round's roles are fresh git worktrees: the incumbent (the lineage head), the
candidate (head + change), or the baseline.  Nothing has compiled them, so before
anything tests or measures a role, ``built_roles`` builds it through the executor
(``Executor.prepare_role``): the docker executor commits a per-round image holding the
built tree, the local one builds the tree in place.  Every job of that role then runs
in a fresh process on that build (``Round.job`` hands the build to the job).

A candidate whose change touches no native or build file (``Target.needs_rebuild``)
is not compiled again: it takes the incumbent's native build with its own changed
files laid over it, so its own Python files are what is imported.  Which role was
rebuilt or reused, and why, goes into ``builds.json`` and the round's reasons.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from runner.executors.base import BuildJob, BuiltRole, RoleBuildFailed

if TYPE_CHECKING:
    from runner.flow.round_context import Round

BUILDS_RECORD = "builds.json"
_ORDER = ("baseline", "incumbent", "candidate", "final")
TREE_OF = {
    "baseline": "the base commit",
    "incumbent": "the lineage head",
    "candidate": "the candidate (head + change)",
    "final": "the final best (the lineage head)",
}


def gpu_archs(target_gpu: str) -> str | None:
    """GPU_ARCHS for the build: the campaign's AMD architecture (``gfx942``); None
    for other devices (the build then uses the target's own default)."""
    return target_gpu if target_gpu.startswith("gfx") else None


@dataclass(frozen=True)
class RolePlan:
    role: str
    tree: Path
    reuse_from: str | None  # the role whose native build is reused, or None: build
    reason: str


def plan_builds(
    roles: Mapping[str, Path], changed: Sequence[str] | None, needs_rebuild: bool
) -> list[RolePlan]:
    """Which role is built and which reuses another's build, with the reason.

    ``changed``: the files the candidate's change touches (None: no change, e.g. the
    baseline); ``needs_rebuild``: whether any of them is a native or build file."""
    plans = []
    for role in sorted(roles, key=lambda r: _ORDER.index(r) if r in _ORDER else len(_ORDER)):
        tree = roles[role]
        if role == "candidate" and "incumbent" in roles and changed is not None:
            if needs_rebuild:
                why = f"rebuilt: the change touches native or build files ({', '.join(changed)})"
                plans.append(RolePlan(role, tree, None, why))
            else:
                plans.append(
                    RolePlan(
                        role,
                        tree,
                        "incumbent",
                        "reused the incumbent's native build: the change touches no native "
                        f"or build file ({', '.join(changed)}), so only those files differ",
                    )
                )
            continue
        what = TREE_OF.get(role, role)
        plans.append(RolePlan(role, tree, None, f"rebuilt: a fresh tree of {what}"))
    return plans


def describe(built: Sequence[BuiltRole]) -> str:
    """One line for the round's records."""
    parts = [f"{b.role} {b.reason} ({b.seconds:.1f} s)" for b in built]
    return "build: " + "; ".join(parts)


@contextlib.contextmanager
def built_roles(
    rnd: Round, roles: Mapping[str, Path], changed: Sequence[str] | None = None
) -> Iterator[list[BuiltRole]]:
    """Build every role of ``roles`` (role -> tree) once for this round and register
    the builds with the round, so each of its jobs runs on its role's build; free them
    when the round is done.  A target without native code builds nothing.  A failed
    build raises ``RoundFailed`` with the build log's tail."""
    from runner.flow.rounds import RoundFailed

    target = rnd.target
    if not target.editable_install:
        yield []
        return
    m = rnd.manifest
    archs = gpu_archs(m.target_gpu)
    in_place = rnd.executor.name != "docker"
    commands = tuple(tuple(c) for c in target.build_commands(archs, in_place=in_place))
    env = target.build_env(archs)
    needs = changed is not None and target.needs_rebuild(list(changed))
    done: dict[str, BuiltRole] = {}
    try:
        for plan in plan_builds(roles, changed, needs):
            reuse = done[plan.reuse_from] if plan.reuse_from else None
            job = BuildJob(
                role=plan.role,
                round=rnd.round,
                source_dir=plan.tree,
                out_dir=rnd.tmp / f"build-{plan.role}",
                commands=() if reuse else commands,
                env=env,
                reuse=reuse,
                changed=tuple(changed or ()),
                reason=plan.reason,
            )
            rnd.progress(f"round-{rnd.round}: build-{plan.role} ({plan.reason})")
            try:
                built = rnd.executor.prepare_role(job)
            except RoleBuildFailed as exc:
                raise RoundFailed(exc.message, exc.log_path) from exc
            done[plan.role] = built
            rnd.builds[plan.tree] = built
        record = [
            {
                "role": b.role,
                "rebuilt": b.rebuilt,
                "reason": b.reason,
                "seconds": b.seconds,
                "image": b.image,
                "executor": rnd.executor.name,
                "commands": [list(c) for c in commands] if b.rebuilt else [],
            }
            for b in done.values()
        ]
        (rnd.tmp / BUILDS_RECORD).write_text(json.dumps(record, indent=2) + "\n", "utf-8")
        yield list(done.values())
    finally:
        for built in done.values():
            rnd.builds.pop(built.source_dir, None)
            rnd.executor.release_role(built)
