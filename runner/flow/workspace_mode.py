"""Workspace mode end to end (docs/primus-turbo.md, "Workspace mode").

``campaign init --mode workspace`` extracts the op's kernel files, with its focused
test and benchmark files and the rest of the target package (so that it imports),
from the ``--source`` checkout into ``<campaigns root>/workspaces/<campaign>``, a git
repository of its own: the campaign's source.  Rounds run there as in repo mode (the
package is imported from the worktree's ``src/``).  ``campaign accept`` then runs the
integration gate in the full repository: the lineage head's kernel files synced back
into a fresh worktree of the upstream commit they were extracted from, the target's
build when a native or build file changed, and the upstream focused test; only when
every acceptance check passes is the synced result committed there, on the branch
``<campaign>-integrated`` of the upstream repository.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from runner.core.errors import ConfigError
from runner.core.files import write_atomic
from runner.core.import_cause import explain_failure
from runner.core.processes import GIT_TOOL_COMMIT, run
from runner.store.lineage import Lineage
from runner.store.minimal_stack import Stack, plan_stack, write_stack
from runner.store.stack_platform import apply_layer
from runner.store.workspace import (
    WorkspaceRecord,
    extract_workspace,
    load_record,
    sync_back,
    workspace_command,
)
from runner.targets.base import Target
from runner.targets.registry import get_target

if TYPE_CHECKING:
    from runner.round.context import RoundPlan
    from runner.store.manifest import Manifest

WORKSPACES = "workspaces"
IDENT = list(GIT_TOOL_COMMIT)


def workspace_dir(campaigns_root: Path, name: str) -> Path:
    return Path(campaigns_root).resolve() / WORKSPACES / name


def create_workspace(
    target: Target, upstream: Path, dest: Path, fields: dict[str, Any]
) -> dict[str, Any]:
    """Extract into ``dest`` (a new git repository) and return ``fields`` rewritten for
    it: source, kernel_source under ``src/``, the commands' test/bench paths moved,
    base_commit the workspace's first commit.  The upstream forms of the commands are
    recorded in ``src/UPSTREAM.yaml`` for the integration gate."""
    if target.editable_install:  # Primus-Turbo: target.for_workspace gives the stack's
        raise ConfigError(
            f"workspace mode extracts a package that imports from its source files; "
            f"{target.name} needs its native extension built from the full tree: use "
            "--mode repo (the default)"
        )
    if dest.exists():
        raise ConfigError(f"{dest} already exists; choose another --name")
    op, gran, backend = fields["target_op"], fields.get("granularity"), fields["target_backend"]
    scaffolding = target.workspace_scaffolding(op, gran, backend)
    tests, bench = scaffolding.get("tests", []), scaffolding.get("bench", [])
    beside = scaffolding.get("bench_optional", [])
    bench = [*bench, *(f for f in beside if (upstream / f).is_file())]
    kernels = list(fields["kernel_source"])
    commands = {k: fields[k] for k in ("test_command", "benchmark_command")}
    extra: WorkspaceRecord = {"commands": commands, "target": target.name}
    stack = None
    if scaffolding.get("stack"):
        roots = (target.package, "tests")
        seeds = [
            *scaffolding["stack"],
            *(k[:-3].replace("/", ".") for k in kernels if k.endswith(".py")),
        ]
        stack = plan_stack(upstream, seeds, roots, optional=scaffolding["optional"])
        extra["stand_ins"] = sorted(stack.written)
        # on a CUDA-declared campaign: the stack's platform layer (never the kernels)
        layer = apply_layer(stack, upstream, str(fields.get("target_gpu") or ""))
        if layer is not None:
            extra["platform"] = layer
        tests = [f for f in stack.carried if f.startswith("tests/")]
        support = [f for f in stack.carried if f not in kernels and f not in tests]
    else:
        listed = run(["git", "-C", str(upstream), "ls-files", "--", target.package])
        support = [f for f in listed.stdout.splitlines() if f and f not in kernels]
    extract_workspace(
        upstream, kernels, dest, tests=tests, bench=bench, support=support, extra=extra
    )
    if stack is not None:
        write_stack(
            Stack(written=stack.written), upstream, dest, {target.package: "src", "tests": "tests"}
        )
    run(["git", "init", "-q", "-b", "main"], cwd=dest)
    run(["git", "add", "-A"], cwd=dest)
    run(["git", *IDENT, "commit", "-q", "-m", "workspace: extracted"], cwd=dest)
    head = run(["git", "rev-parse", "HEAD"], cwd=dest).stdout.strip()
    out = dict(fields)
    out.update(
        source=str(dest),
        base_commit=head,
        kernel_source=[f"src/{k}" for k in kernels],
        **{k: workspace_command(v, tests, bench) for k, v in commands.items()},
    )
    return out


def integration_gate(
    rnd: RoundPlan, head_tree: Path, log_path: Path
) -> tuple[bool, str, Callable[[], str] | None]:
    """Sync back, build, upstream focused test; returns (ok, detail, a ``commit``
    callable that records the result on the upstream branch)."""
    from runner.round.context import run_command_in  # the flows' context, loaded late

    record = load_record(head_tree)
    upstream = Path(record["upstream"])
    test_command = str(record.get("commands", {}).get("test_command") or "")
    if not test_command:
        return False, "UPSTREAM.yaml records no upstream test command", None
    lines: list[str] = []
    lineage = Lineage(upstream, rnd.campaign.name, None)
    with lineage.worktree(str(record["commit"])) as tree:
        written = sync_back(head_tree, tree)
        lines.append(
            f"synced back into {upstream} @ {str(record['commit'])[:12]}: "
            f"{', '.join(written) or 'no kernel file changed'}"
        )
        # the full repository's own target: Primus-Turbo's focused test imports the
        # compiled extension, built there from the synced tree (not the stack's stand-in)
        target = get_target(str(record.get("target") or rnd.target.name))
        run_in = tree
        if record.get("platform"):
            # a non-AMD host cannot build upstream's HIP extension: the focused test
            # runs from the synced tree's own minimal stack, with the platform layer
            run_in = platform_stack(target, rnd.manifest, tree, record)
            built = f"no build (non-AMD host: {record['platform'].get('note', '')})"
            lines.append(f"stack of the synced tree with the platform layer: {run_in}")
        elif target.editable_install or target.needs_rebuild(written):
            build = " && ".join(shlex.join(c) for c in target.install_commands(None))
            code, text, _ = run_command_in(rnd, "integration-build", tree, build)
            lines.append(f"$ {build}\n{text}")
            if code != 0:
                write_atomic(log_path, "\n".join(lines))
                return False, f"build failed (exit {code}): {explain_failure('', text)}", None
            built = "built"
        else:
            built = "no build (no native or build file changed)"
        code, text, _ = run_command_in(rnd, "integration-test", run_in, test_command)
        lines.append(text)
        write_atomic(log_path, "\n".join(lines))
        if code != 0:
            cause = explain_failure("", text).strip() or text.strip()[-300:]
            return False, f"upstream focused test failed (exit {code}): {cause}", None
        detail = f"synced {len(written)} file(s), {built}, `{test_command}` passed"
        commit = None
        if written:
            run(["git", "add", "--", *written], cwd=tree)
            message = f"[optimize] {rnd.campaign.name}: workspace lineage synced back"
            run(["git", *IDENT, "commit", "-q", "--no-verify", "-m", message], cwd=tree)
            sha = run(["git", "rev-parse", "HEAD"], cwd=tree).stdout.strip()
            commit = _brancher(upstream, f"{rnd.campaign.name}-integrated", sha)
    return True, detail, commit


def _brancher(upstream: Path, branch: str, sha: str) -> Callable[[], str]:
    def make_branch() -> str:
        proc = run(["git", "-C", str(upstream), "branch", branch, sha], check=False)
        if proc.returncode != 0:
            return f"commit {sha[:12]} (branch {branch} not created: {proc.stdout.strip()})"
        return f"commit {sha[:12]} on branch {branch} of {upstream}"

    return make_branch


STACK_DIR = ".turbo-campaign-stack"


def platform_stack(target: Target, manifest: Manifest, tree: Path, record: WorkspaceRecord) -> Path:
    """The minimal stack of the synced ``tree`` (upstream's layout: package and tests
    at the top), with the platform layer the workspace recorded, in a folder of the
    tree that goes with it; returns that folder."""
    op, gran = manifest.target_op, manifest.granularity
    scaffolding = target.for_workspace(op, gran, manifest.target_backend).workspace_scaffolding(
        op, gran, manifest.target_backend
    )
    kernels = [str(e["path"]) for e in record["files"]]
    seeds = [*scaffolding["stack"], *(k[:-3].replace("/", ".") for k in kernels)]
    stack = plan_stack(tree, seeds, (target.package, "tests"), optional=scaffolding["optional"])
    apply_layer(stack, tree, str(record["platform"].get("gpu", manifest.target_gpu)))
    dest = tree / STACK_DIR
    write_stack(stack, tree, dest, {})
    return dest
