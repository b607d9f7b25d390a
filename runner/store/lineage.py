"""The lineage in the target's git repository.

Each accepted round is one commit whose parent is the previous accepted round's commit
(a strictly linear chain from the campaign's base commit).  The chain head is kept in
``refs/campaigns/<campaign>/head``; with ``git_commit`` the optimisation branch is
moved to it as well.  Incumbent and candidate are always measured from fresh
worktrees, never from the user's checkout; a rollback moves no ref of the lineage (the
user's checkout is put back to the head by ``runner.flow.checkout``, the failed change
kept under ``refs/campaigns/<campaign>/rolled-back/round-N``).
"""

from __future__ import annotations

import contextlib
import email.errors
import email.header
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from runner.core.errors import (
    CheckoutOffLineage,
    CommandFailed,
    ConfigError,
    InfrastructureError,
    NothingToDo,
    PatchRefused,
)
from runner.core.files import copy_plain_tree, read_bounded
from runner.core.limits import MAX_PATCH_BYTES, MAX_PATCH_LINE
from runner.core.pause_points import pause_point
from runner.core.processes import GIT_NO_SIGN, run
from runner.store.leftovers import WORKTREE_PREFIX, make_owned_dir

# Primus-Turbo keeps its historical tips in its own tree (upstream's kernel-optimize skill page,
# READ_HISTORICAL_TIPS, checked at a6a16cdc); runner.store.tips writes there, and
# that folder is never part of a round's change.
UPSTREAM_TIPS_DIR = "agent/historical_experience"

_IDENTITY = {
    "GIT_AUTHOR_NAME": "turbo-campaign",
    "GIT_AUTHOR_EMAIL": "turbo-campaign@localhost",
    "GIT_COMMITTER_NAME": "turbo-campaign",
    "GIT_COMMITTER_EMAIL": "turbo-campaign@localhost",
}


class Lineage:
    """Git operations on the target repository ``source`` for one campaign."""

    def __init__(self, source: Path, campaign: str, branch: str | None) -> None:
        self.source = Path(source).resolve()
        self.campaign = campaign
        self.branch = branch
        self.ref = f"refs/campaigns/{campaign}/head"

    def git(self, *args: str, cwd: Path | None = None, check: bool = True) -> str:
        argv = ["git", *GIT_NO_SIGN, *args]
        proc = run(argv, cwd=cwd or self.source, check=check, env=_git_env())
        return proc.stdout.strip()

    # ---- the chain head ---------------------------------------------------------
    def resolve(self, rev: str) -> str:
        try:
            return self.git("rev-parse", "--verify", f"{rev}^{{commit}}")
        except CommandFailed:
            raise ConfigError(f"{rev!r} is not a commit in {self.source}") from None

    def start(self, base_commit: str) -> list[str]:
        """Point the chain head (and the branch, if any) at the base commit.  Returns
        the refs this call created (those that did not exist before)."""
        created = [] if self._exists(self.ref) else [self.ref]
        self.git("update-ref", self.ref, base_commit)
        if self.branch:
            branch = f"refs/heads/{self.branch}"
            existing = self.git("rev-parse", "--verify", "-q", branch, check=False)
            if existing and existing != base_commit:
                raise ConfigError(
                    f"branch {self.branch} already exists at {existing[:12]} in {self.source}; "
                    "pick another --git-branch or delete that branch"
                )
            self.git("update-ref", branch, base_commit)
            created += [] if existing else [branch]
        return created

    @contextlib.contextmanager
    def starting(self, base_commit: str) -> Iterator[None]:
        """``start`` for the baseline, undone when the body raises: a baseline that
        fails leaves no chain head and no branch of its own in the source repository
        (a ref is deleted only while it still points at the base commit)."""
        created = self.start(base_commit)
        try:
            yield
        except BaseException:
            for ref in created:
                with contextlib.suppress(CommandFailed):
                    self.git("update-ref", "-d", ref, base_commit)
            raise

    def _exists(self, ref: str) -> bool:
        return bool(self.git("rev-parse", "--verify", "-q", ref, check=False))

    def head(self) -> str:
        head = self.git("rev-parse", "--verify", "-q", self.ref, check=False)
        if not head:
            raise ConfigError(
                f"campaign {self.campaign} has no lineage in {self.source}; run the baseline"
            )
        return head

    # ---- patches ----------------------------------------------------------------
    def working_tree_patch(self) -> str:
        """The user's working-tree diff against the chain head (tracked files and
        untracked files not ignored).

        Refused when the checkout does not hold the accepted rounds: its HEAD must be
        the chain head, or an ancestor of it whose working tree carries every change
        the chain made since (the user editing on, uncommitted, after an accepted
        round).  Otherwise the diff would undo accepted rounds: a round of a change
        nobody made."""
        self.check_checkout()
        untracked = self.git("ls-files", "--others", "--exclude-standard").splitlines()
        if untracked:
            self.git("add", "--intent-to-add", "--", *untracked)
        try:
            # upstream's tips (runner.store.tips) live in the checkout: never a change
            exclude = f":(exclude){UPSTREAM_TIPS_DIR}"
            return run(
                ["git", "diff", "--binary", self.head(), "--", ".", exclude],
                cwd=self.source,
                env=_git_env(),
            ).stdout
        finally:
            if untracked:
                self.git("reset", "-q", "--", *untracked)

    def descends(self, at: str, head: str) -> bool:
        """``at`` is ``head`` or a commit made on top of it."""
        proc = run(
            ["git", "merge-base", "--is-ancestor", head, at],
            cwd=self.source,
            check=False,
            env=_git_env(),
        )
        return proc.returncode == 0

    def check_checkout(self) -> None:
        """See ``working_tree_patch``; raises ConfigError with the way out."""
        head = self.head()
        at = self.git("rev-parse", "--verify", "-q", "HEAD", check=False)
        if at == head or (at and self.descends(at, head)):
            return  # on top of the head (the user committed the change): its diff is it
        ahead = self.git("rev-list", "--count", f"{at}..{head}", check=False) if at else ""
        is_ancestor = bool(at) and (
            run(
                ["git", "merge-base", "--is-ancestor", at, head],
                cwd=self.source,
                check=False,
                env=_git_env(),
            ).returncode
            == 0
        )
        if is_ancestor:
            made = run(["git", "diff", "--binary", at, head], cwd=self.source, env=_git_env())
            held = run(
                ["git", "apply", "--check", "--reverse", "--whitespace=nowarn", "-"],
                cwd=self.source,
                check=False,
                input_text=made.stdout,
                env=_git_env(),
            )
            if held.returncode == 0:
                return
        where = f"at {at[:12]}" if at else "without a commit"
        since = f", {ahead} accepted commit(s) behind it" if is_ancestor else ""
        own = "" if is_ancestor or not at else self._own_commits(at, head)
        raise CheckoutOffLineage(
            f"the checkout {self.source} is {where}, not at the lineage head {head[:12]}"
            f"{since}, and its working tree does not hold those rounds' changes: its diff "
            "against the head would undo accepted rounds (a change nobody made). Bring the "
            f"checkout to the head (git -C {self.source} stash; git -C {self.source} "
            f"checkout --detach {head[:12]}; git -C {self.source} stash pop), or pass the "
            f"change as --patch FILE{own}"
        )

    def _own_commits(self, at: str, head: str) -> str:
        """The way out for commits of the user's that the head lacks (a checkout to the
        head would leave them behind)."""
        fork = self.git("merge-base", at, head, check=False)
        if not fork:
            return ""
        return (
            f". Your own commits ({fork[:12]}..{at[:12]}) would stay behind a checkout: "
            f"pass them as the patch (git -C {self.source} diff --binary {fork[:12]} > "
            "change.patch; then --patch change.patch)"
        )

    def check_patch(self, patch: str) -> list[str]:
        """Refuse an empty patch or one that does not apply to the head; return the
        paths it touches."""
        if not patch.strip():
            raise NothingToDo(
                "the candidate patch is empty: edit the kernel in the source tree or pass "
                "--patch FILE"
            )
        if len(patch) > MAX_PATCH_BYTES:
            raise PatchRefused(
                f"the candidate patch has {len(patch):,} characters, over the "
                f"{MAX_PATCH_BYTES >> 20} MiB a round's patch may be: one hypothesis per "
                "round; pass the patch of that one change"
            )
        with self.worktree(self.head()) as tree:
            self._apply(tree, patch)
            applied = applied_paths(tree)
            touched = [*patch_paths(patch), *(p for p in applied if p not in patch_paths(patch))]
            _refuse_undecodable_sources(tree, touched)
        return touched

    def _apply(self, tree: Path, patch: str) -> None:
        proc = run(
            ["git", "apply", "--index", "--whitespace=nowarn", "-"],
            cwd=tree,
            check=False,
            input_text=patch,
            env=_git_env(),
        )
        if proc.returncode != 0:
            raise PatchRefused(
                f"the candidate patch does not apply to the lineage head: {proc.stdout.strip()}"
                "\nrebase your change onto the last accepted round (git diff against "
                f"{self.ref}) and try again"
            )

    # ---- worktrees ---------------------------------------------------------------
    @contextlib.contextmanager
    def worktree(self, commit: str, patch: str | None = None) -> Iterator[Path]:
        """A fresh detached worktree at ``commit`` (with ``patch`` applied), removed
        afterwards (a killed command's worktree is removed by the next command:
        ``runner.store.leftovers``)."""
        parent = make_owned_dir(
            f"{WORKTREE_PREFIX}{self.campaign}-",
            {"campaign": self.campaign, "source": str(self.source)},
        )
        tree = parent / "src"
        try:
            self.git("worktree", "add", "--detach", "-q", str(tree), commit)
            if patch:
                self._apply(tree, patch)
            yield tree
        finally:
            with contextlib.suppress(CommandFailed):
                self.git("worktree", "remove", "--force", str(tree))
            shutil.rmtree(parent, ignore_errors=True)
            with contextlib.suppress(CommandFailed):
                self.git("worktree", "prune")

    # ---- accept ------------------------------------------------------------------
    def make_commit(self, parent: str, patch: str, message: str) -> str:
        """Create the round's commit (``patch`` on ``parent``) without moving any ref;
        ``advance`` moves the refs once the records are written."""
        with self.worktree(parent, patch) as tree:
            self.git("commit", "-q", "--no-verify", "-m", message, cwd=tree)
            pause_point("commit")
            return self.git("rev-parse", "HEAD", cwd=tree)

    def advance(self, new: str, old: str, *, move_branch: bool) -> None:
        """Move the chain head (and the branch) from ``old`` to ``new`` atomically."""
        self.git("update-ref", self.ref, new, old)
        if move_branch and self.branch:
            self.git("update-ref", f"refs/heads/{self.branch}", new, old)

    def parent(self, commit: str) -> str:
        return self.git("rev-parse", f"{commit}^")

    def restore_user_tree(self, paths: list[str]) -> None:
        """Put the touched files of the user's checkout back to the head (after a rolled
        back round, docs/protocol.md §6.7); their index entries back to the checkout's
        HEAD, as before the edit."""
        head = self.head()
        tracked = [p for p in paths if _exists(self, head, p)]
        if tracked:
            self.git("checkout", head, "--", *tracked)
            if self.git("rev-parse", "--verify", "-q", "HEAD", check=False):
                self.git("reset", "-q", "HEAD", "--", *tracked)
        for p in set(paths) - set(tracked):
            (self.source / p).unlink(missing_ok=True)

    def text_at_head(self, path: str) -> str:
        """The file at ``path`` as the head holds it ("" where the head holds none)."""
        return self.git("show", f"{self.head()}:{path}", check=False)

    def tree_of(self, patch: str) -> str:
        """The git tree of the head with ``patch`` applied (through a private index:
        no checkout, worktree or ref is touched); two patches are the same change when
        their trees are the same."""
        head = self.head()
        if not patch.strip():
            return self.git("rev-parse", f"{head}^{{tree}}")
        with tempfile.TemporaryDirectory(prefix="turbo-index-") as tmp:
            env = {**_git_env(), "GIT_INDEX_FILE": str(Path(tmp) / "index")}
            run(["git", "read-tree", head], cwd=self.source, env=env)
            run(
                ["git", "apply", "--cached", "--whitespace=nowarn", "-"],
                cwd=self.source,
                env=env,
                input_text=patch,
            )
            return run(["git", "write-tree"], cwd=self.source, env=env).stdout.strip()

    def keep_change(self, name: str, patch: str, message: str) -> str:
        """Keep ``patch``, a change the lineage did not take, as a commit on the head
        under ``refs/campaigns/<campaign>/<name>`` (no checkout touched); returns the
        ref."""
        commit = self.git("commit-tree", self.tree_of(patch), "-p", self.head(), "-m", message)
        ref = f"refs/campaigns/{self.campaign}/{name}"
        self.git("update-ref", ref, commit)
        return ref

    def linear_history(self, base: str) -> list[str]:
        """Commits from base (exclusive) to head; raises if the chain is not linear or
        base is not an ancestor of the head (a rev range would list commits anyway)."""
        head = self.head()
        if (
            run(
                ["git", "merge-base", "--is-ancestor", base, head],
                cwd=self.source,
                check=False,
                env=_git_env(),
            ).returncode
            != 0
        ):
            raise InfrastructureError(
                f"base commit {base[:12]} is not an ancestor of the lineage head {head[:12]}"
            )
        merges = self.git("rev-list", "--merges", f"{base}..{self.head()}")
        if merges:
            raise InfrastructureError(f"lineage has merge commits: {merges.split()}")
        return self.git("rev-list", "--reverse", f"{base}..{self.head()}").split()


def _refuse_undecodable_sources(tree: Path, touched: list[str]) -> None:
    """A patch that leaves a Python source not UTF-8 (``git diff --binary`` of a latin-1
    edit) is refused before the round opens: Python cannot import it, and the audit
    reads it as text."""
    for path in touched:
        file = tree / path
        if not path.endswith(".py") or not file.is_file():
            continue
        try:
            file.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise PatchRefused(
                f"the patch leaves {path} not UTF-8 (byte {exc.start}: "
                f"{file.read_bytes()[exc.start : exc.start + 1]!r}); Python sources are "
                "UTF-8: save the file as UTF-8 (iconv -f latin1 -t utf-8) and make the "
                "patch again; nothing was measured"
            ) from None


def _exists(lineage: Lineage, commit: str, path: str) -> bool:
    proc = run(["git", "cat-file", "-e", f"{commit}:{path}"], cwd=lineage.source, check=False)
    return proc.returncode == 0


def _git_env() -> dict[str, str]:
    env = dict(os.environ)
    for key, value in _IDENTITY.items():
        env.setdefault(key, value)
    env["GIT_TERMINAL_PROMPT"] = "0"
    return env


def read_patch_file(path: Path) -> str:
    """A candidate patch file as text; a file too large, with a line over
    MAX_PATCH_LINE bytes, or not UTF-8 is refused with what to do (never a traceback)."""
    size = path.stat().st_size
    if size > MAX_PATCH_BYTES:
        raise PatchRefused(
            f"{path} is {size} bytes, over the {MAX_PATCH_BYTES >> 20} MiB a round's patch may "
            "be: one hypothesis per round; pass the patch of that one change"
        )
    data = read_bounded(path, "patch", max_bytes=MAX_PATCH_BYTES, max_line=MAX_PATCH_LINE)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PatchRefused(
            f"{path} is not UTF-8 text (byte {exc.start}: {data[exc.start : exc.start + 1]!r}): "
            "pass a patch made by `git diff --binary` (binary files are encoded as text "
            "there), with the changed text files in UTF-8"
        ) from None


def patch_subject(patch: str) -> str | None:
    """The subject of a patch made by ``git format-patch`` (its mail header's
    ``Subject:``, continuation lines joined, the ``[PATCH n/m]`` tag dropped); None for
    a plain diff."""
    lines = patch.splitlines()
    if not lines or not lines[0].startswith("From "):
        return None
    for k, line in enumerate(lines):
        if not line.strip() or line.startswith("diff --git"):
            return None  # the header ended without a subject
        if line.startswith("Subject:"):
            text = line[len("Subject:") :]
            for more in lines[k + 1 :]:
                if not more.startswith((" ", "\t")):
                    break
                text += " " + more.strip()
            text = re.sub(r"^\s*\[[^\]]*\]\s*", "", _mime_decoded(text)).strip()
            return text or None
    return None


def _mime_decoded(text: str) -> str:
    """A mail header's RFC 2047 encoded words (``=?UTF-8?q?na=C3=AFve?=``, how
    ``git format-patch`` writes a non-ASCII subject) as the text they encode; text that
    does not decode stays as it is."""
    if "=?" not in text:
        return text
    try:
        return str(email.header.make_header(email.header.decode_header(text)))
    except (email.errors.HeaderParseError, LookupError, UnicodeDecodeError, ValueError):
        return text


def patch_paths(patch: str) -> list[str]:
    """Paths a unified git diff touches (new names for renames)."""
    paths: list[str] = []
    for line in patch.splitlines():
        if line.startswith("+++ ") or line.startswith("--- "):
            name = line[4:].strip()
            if name != "/dev/null" and name[:2] in ("a/", "b/"):
                name = name[2:]
                if name not in paths:
                    paths.append(name)
    return paths


def applied_paths(tree: Path) -> list[str]:
    """Every path the patch applied in ``tree``'s index changed, as git applied it: both
    names of a rename, a copy, a mode change, a binary file (the ``---``/``+++`` lines
    alone missed all four, so a renamed or chmod-ed test helper passed the scope
    check).  A patch that makes a path a symbolic link or a submodule is refused: a
    kernel change is a change of file contents (a link to a host file was copied into
    the round's snapshot)."""
    raw = run(
        ["git", "diff", "--cached", "--raw", "--no-renames", "-z", "HEAD"],
        cwd=tree,
        env=_git_env(),
    ).stdout
    fields = raw.split("\0")
    paths: list[str] = []
    for meta, path in zip(fields[0::2], fields[1::2], strict=False):
        new_mode = meta.split()[1] if meta.startswith(":") else ""
        if new_mode in ("120000", "160000"):
            kind = "a symbolic link" if new_mode == "120000" else "a submodule"
            raise PatchRefused(
                f"the candidate patch makes {path} {kind}; a round's change is a change of "
                "file contents: change the file itself (nothing was measured)"
            )
        if path and path not in paths:
            paths.append(path)
    return paths


def snapshot(tree: Path, files: list[str], dest: Path) -> None:
    """Copy the kernel files (or folders) of ``tree`` into ``dest`` (kernel_snapshot):
    regular files only (``copy_plain_tree``), never what a link points at."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel in files:
        src = tree / rel
        target = dest / rel
        if src.is_symlink():
            continue
        if src.is_dir():
            copy_plain_tree(src, target)
        elif src.is_file():
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
