"""Building the trees under test of a target with native code, once per build key.

A round's roles are fresh git worktrees: the incumbent (the lineage head), the
candidate (head + change), or the baseline.  Before anything tests or measures a
role, ``built_roles`` gives it a build through the executor (``Executor.prepare_role``)
keyed by what determines a build (``runner.executors.build_cache.build_key``: the
tree's native and build files, GPU_ARCHS, what the build reads from its environment
(for Primus-Turbo PRIMUS_TURBO_BUILD_CK and PRIMUS_TURBO_FRAMEWORK too), the image or
toolchain, the commands):

* "compile": no intact build of the key is cached; the tree is compiled and its build
  stored under the key (the docker executor commits it as the key's image, the local
  one keeps its build products under the campaigns root);
* "hit": the key's build was made before (an earlier round, or another campaign on
  the same commit): it is laid under the role's own tree, nothing is compiled;
* "reuse": another role of this round has the same key (a change that touches no
  native or build file), and takes its build the same way.

So the lineage head is compiled once: a rolled-back round leaves its build cached,
and an accepted candidate's build is the next round's incumbent's.  Every job of the
role then runs in a fresh process on that build (the plan ``built_roles`` yields hands
it to the job: ``RoundPlan.worker_job``).
What each role got, how long it took and why goes into ``builds.json`` and the
round's reasons.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from runner.core.artifact_names import BUILDS
from runner.core.files import write_atomic
from runner.executors.base import BuildJob, BuiltRole
from runner.executors.build_cache import BuildCache, build_key, native_inputs
from runner.round.context import RoundPlan
from runner.round.tamper_check import BuildWatch

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


def ordered(roles: Mapping[str, Path]) -> list[str]:
    """The roles in build order: the lineage head before the candidate."""
    return sorted(roles, key=lambda r: _ORDER.index(r) if r in _ORDER else len(_ORDER))


def reason_for(built: BuiltRole, changed: Sequence[str] | None, first: str | None) -> str:
    """Why the role was built as it was (``first``: the role of this round whose build
    it reused)."""
    what = TREE_OF.get(built.role, built.role)
    touched = ", ".join(changed or ())
    if built.outcome == "reuse":
        if built.role == "candidate" and changed is not None:
            return (
                f"reused the {first}'s native build: the change touches no native or build "
                f"file ({touched}), so only those files differ"
            )
        return f"reused the {first}'s native build: the same native and build files"
    if built.outcome == "hit":
        return f"cache hit: {what} was built before (key {built.key[:12]})"
    why = f"; {built.reason}" if built.reason else ""
    if built.role == "candidate" and changed is not None:
        return f"compiled: the change touches native or build files ({touched}){why}"
    return f"compiled: {what}{why}"


def describe(built: Sequence[BuiltRole]) -> str:
    """One line for the round's records."""
    parts = [f"{b.role} {b.reason} ({b.seconds:.1f} s)" for b in built]
    return "build: " + "; ".join(parts)


def _write_record(
    path: Path, built: list[BuiltRole], executor: str, commands: tuple[tuple[str, ...], ...]
) -> None:
    """``builds.json``: per role its build outcome, time, reason, key and image, and the
    commands when it was rebuilt."""
    record = [
        {
            "role": b.role,
            "build": b.outcome,
            "seconds": b.seconds,
            "reason": b.reason,
            "key": b.key,
            "image": b.image,
            "executor": executor,
            "commands": [list(c) for c in commands] if b.rebuilt else [],
        }
        for b in built
    ]
    write_atomic(path, json.dumps(record, indent=2) + "\n")


@dataclass(frozen=True)
class Built:
    """What ``built_roles`` gives a round while its builds are held: ``plan``, the
    round's plan with each tree's build (``RoundPlan.builds``) and the roles' tree folders
    read-only to each other (``RoundPlan.role_dirs``), from which every job of the round
    runs; ``roles``: each role's build in build order (none for a target without
    native code)."""

    plan: RoundPlan
    roles: tuple[BuiltRole, ...] = ()


@contextlib.contextmanager
def built_roles(
    rnd: RoundPlan, roles: Mapping[str, Path], changed: Sequence[str] | None = None
) -> Iterator[Built]:
    """Give every role of ``roles`` (role -> tree) its build for this round: the
    plan it yields hands each of its jobs its role's build; the per-round parts are
    freed when the round is done.  A target without native code builds nothing.  A
    failed build raises ``MeasurementFailed`` with the build log's tail.  ``changed``:
    the files the candidate's change touches (None: no change).

    Every role's tree is read-only to every other role's processes: the plan's
    ``role_dirs`` (``RoundPlan.guarding``: the roles' folders, unless ``rnd`` names them)
    make the other trees read-only to each role's build commands (its setup.py runs
    arbitrary code) as to its jobs (``RoundPlan.readonly``, ``runner.executors.isolation``),
    and a ``BuildWatch`` fails the round as ``Tampered`` when a role's tree changed
    while another role built (where namespaces are off or unavailable)."""
    guarded = rnd.guarding(roles)
    if not guarded.target.editable_install:
        yield Built(guarded)
        return
    with _builds(guarded, roles, changed) as done:
        builds = {roles[role]: built for role, built in done.items()}
        yield Built(replace(guarded, builds=builds), tuple(done.values()))


def _key(
    rnd: RoundPlan,
    tree: Path,
    archs: str | None,
    commands: tuple[tuple[str, ...], ...],
    facts: Mapping[str, object] | None,
    identity: str,
) -> str:
    """The build cache key of ``tree``'s native inputs (``identity``: the executor's)."""
    target = rnd.target
    inputs = native_inputs(tree, lambda p: target.needs_rebuild([p]))
    return build_key(inputs, gpu_archs=archs, commands=commands, identity=identity, facts=facts)


@contextlib.contextmanager
def _builds(
    rnd: RoundPlan, roles: Mapping[str, Path], changed: Sequence[str] | None
) -> Iterator[dict[str, BuiltRole]]:
    """Every role's build (role -> its build, in build order), released afterwards."""
    target = rnd.target
    m = rnd.manifest
    archs = gpu_archs(m.target_gpu)
    in_place = rnd.executor.name != "docker"
    commands = tuple(tuple(c) for c in target.build_commands(archs, in_place=in_place))
    env = target.build_env(archs)
    facts = target.build_facts(env)
    cache = BuildCache.for_campaign(rnd.campaign.root)
    with rnd.times.step("build keys"):
        identity = rnd.executor.build_identity()
        keys = {r: _key(rnd, t, archs, commands, facts, identity) for r, t in roles.items()}
    done: dict[str, BuiltRole] = {}
    first: dict[str, str] = {}  # key -> the first role of this round built on it
    with rnd.times.step("build guard"):
        watch = BuildWatch(roles)
    try:
        for role in ordered(roles):
            tree, key = roles[role], keys[role]
            job = BuildJob(
                role=role,
                round=rnd.round,
                source_dir=tree,
                out_dir=rnd.tmp / f"build-{role}",
                key=key,
                cache=cache,
                commands=commands,
                env=env,
                built_from=f"campaign {m.campaign_name}, round {rnd.round}, {role}",
                keep=tuple(keys.values()),
                readonly=rnd.readonly(tree),
                hidden=rnd.hidden(),
            )
            rnd.progress(f"round-{rnd.round}: build-{role} (key {key[:12]})")
            with rnd.times.step("build guard"):
                watch.before(role)
            with rnd.times.step("build"):
                built = rnd.executor.prepare_role(job)
            with rnd.times.step("build guard"):
                watch.after(role)
            if built.outcome == "hit" and key in first:
                built = replace(built, outcome="reuse")
            built = replace(built, reason=reason_for(built, changed, first.get(key)))
            first.setdefault(key, role)
            done[role] = built
        with rnd.times.step("build guard"):
            watch.finish()
        _write_record(rnd.tmp / BUILDS, list(done.values()), rnd.executor.name, commands)
        yield done
    finally:
        for built in done.values():
            rnd.executor.release_role(built)
