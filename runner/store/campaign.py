"""The campaign directory (docs/protocol.md §3): layout, init, load, an exclusive
lock, round directories and the closed rounds' ``result.json``.

A round is closed when its ``summary.md``, its ``kernel_snapshot/`` and both logs
mention it; ``records.close_round`` writes ``rounds/round-N/result.json`` last, so
the presence of that file is what "closed" means here.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import shlex
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from runner.core.errors import (
    CampaignBusy,
    CampaignNotFound,
    ConfigError,
    RecordDamaged,
    RoundOutOfOrder,
)
from runner.core.files import write_atomic
from runner.core.outcomes import RoundResult, Status
from runner.core.processes import pid_alive
from runner.core.timestamps import now_second
from runner.core.versions import require_schema_version
from runner.store.appendlog import append
from runner.store.log_format import optimize_title, trend_header
from runner.store.manifest import (
    Manifest,
    load_manifest,
    manifest_yaml,
    save_manifest,
    validate_manifest,
)

RESULT_SCHEMA_VERSION = 1
MANIFEST_NAME = "manifest.yaml"
LOCK_NAME = ".lock"
COMMAND_WIDTH = 200


@dataclass(frozen=True)
class LockHolder:
    """Who holds the campaign lock: its pid, command line and start (``now_second``)."""

    pid: int
    command: str
    started: str

    def describe(self) -> str:
        return f"`{self.command}` (pid {self.pid}, since {self.started or 'unknown'})"


def _command_line() -> str:
    """This process's command line as the user typed it (``campaign validate ...``)."""
    argv = sys.argv or ["python"]
    first = Path(argv[0])
    prog = "campaign" if first.name == "campaign" or first.parent.name == "runner" else first.name
    text = " ".join([prog, *(shlex.quote(a) for a in argv[1:])])
    return text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 1] + "…"


def _parse_holder(text: str) -> LockHolder | None:
    """The lock file's text: the holder's pid, then one JSON line about it."""
    first, _, rest = text.partition("\n")
    if not first.strip().isdigit():
        return None
    try:
        about = json.loads(rest.strip() or "{}")
    except ValueError:
        about = {}
    about = about if isinstance(about, dict) else {}
    command = str(about.get("command") or "a campaign command")
    return LockHolder(int(first), command, str(about.get("started") or ""))


@dataclass
class Campaign:
    """One campaign directory and its validated manifest."""

    root: Path
    manifest: Manifest
    _lock_depth: int = field(default=0, init=False, repr=False, compare=False)

    # -- layout (docs/protocol.md §3.1) ----------------------------------------
    @property
    def name(self) -> str:
        return self.manifest.campaign_name

    @property
    def manifest_path(self) -> Path:
        return self.root / MANIFEST_NAME

    @property
    def quick_script(self) -> Path:
        return self.root / "quick_test_bench.py"

    @property
    def logs_dir(self) -> Path:
        return self.root / "logs"

    @property
    def optimize_log(self) -> Path:
        return self.logs_dir / "optimize.md"

    @property
    def trend_log(self) -> Path:
        return self.logs_dir / "performance_trend.md"

    @property
    def profiles_dir(self) -> Path:
        return self.root / "profiles"

    @property
    def rounds_dir(self) -> Path:
        return self.root / "rounds"

    @property
    def lock_path(self) -> Path:
        return self.root / LOCK_NAME

    def round_dir(self, n: int) -> Path:
        if n < 1:
            raise RoundOutOfOrder(f"round numbers start at 1, got {n}")
        return self.rounds_dir / f"round-{n}"

    def snapshot_dir(self, n: int) -> Path:
        return self.round_dir(n) / "kernel_snapshot"

    def artifacts_dir(self, n: int) -> Path:
        return self.round_dir(n) / "artifacts"

    def summary_path(self, n: int) -> Path:
        return self.round_dir(n) / "summary.md"

    def result_path(self, n: int) -> Path:
        return self.round_dir(n) / "result.json"

    # -- creation and lookup -----------------------------------------------------
    @classmethod
    def init(cls, campaigns_root: Path, manifest: Manifest, *, force: bool = False) -> Campaign:
        """Create ``<campaigns_root>/<campaign_name>``.  Refuses an existing path; with
        ``force`` an existing directory that is not a campaign (no manifest.yaml) may be
        filled, but an existing campaign is never overwritten."""
        campaigns_root = Path(campaigns_root).resolve()
        check_campaigns_root(campaigns_root)
        root = campaigns_root / manifest.campaign_name
        if root.exists() and (not force or (root / MANIFEST_NAME).exists() or not root.is_dir()):
            raise ConfigError(
                f"{root} already exists; a campaign is never overwritten: pick another "
                "--name, or remove that directory yourself if it is really unwanted"
            )
        data = manifest.model_dump()
        data["campaign_dir"] = str(root)
        if not manifest.quick_command:
            data["quick_command"] = f"python {root / 'quick_test_bench.py'}"
        manifest = validate_manifest(data, "manifest")
        _make_root(campaigns_root)
        if root.exists():
            _populate(root, manifest)
        else:
            _create_atomically(root, manifest)
        return cls(root=root, manifest=manifest)

    @classmethod
    def load(
        cls, path_or_name: str | os.PathLike[str], campaigns_root: Path | None = None
    ) -> Campaign:
        """Open a campaign by directory path or by name under ``campaigns_root``."""
        try:
            return cls._load(path_or_name, campaigns_root)
        except OSError as exc:  # e.g. a name too long for the filesystem
            raise CampaignNotFound(
                f"cannot open campaign {str(path_or_name)[:80]!r} ({exc.strerror or exc}); "
                "check the name or path"
            ) from None

    @classmethod
    def _load(cls, path_or_name: str | os.PathLike[str], campaigns_root: Path | None) -> Campaign:
        given = Path(path_or_name)
        root = given if (given / MANIFEST_NAME).exists() or campaigns_root is None else None
        if root is None:
            assert campaigns_root is not None
            root = Path(campaigns_root) / given
        if not (root / MANIFEST_NAME).exists():
            raise CampaignNotFound(
                f"no campaign at {root} (no {MANIFEST_NAME}); create it with `campaign init` "
                "or check --campaigns-root"
            )
        root = root.resolve()
        manifest = load_manifest(root / MANIFEST_NAME)
        if manifest.campaign_name != root.name:
            raise ConfigError(
                f"{root / MANIFEST_NAME}: campaign_name {manifest.campaign_name!r} differs from "
                f"its directory {root.name!r}; rename the directory back"
            )
        return cls(root=root, manifest=manifest)

    @staticmethod
    def list_names(campaigns_root: Path) -> list[str]:
        root = Path(campaigns_root)
        if not root.is_dir():
            return []
        return sorted(
            p.name
            for p in root.iterdir()
            if not p.name.startswith(".") and (p / MANIFEST_NAME).is_file()
        )

    @classmethod
    def find(cls, campaigns_root: Path, name: str | None = None) -> Campaign:
        """The named campaign, or the only one under ``campaigns_root``."""
        if name is not None:
            return cls.load(name, campaigns_root)
        names = cls.list_names(campaigns_root)
        if len(names) == 1:
            return cls.load(names[0], campaigns_root)
        if not names:
            raise CampaignNotFound(
                f"no campaign under {campaigns_root}; create one with `campaign init` "
                "or point --campaigns-root at the right directory"
            )
        raise CampaignNotFound(
            f"{len(names)} campaigns under {campaigns_root}: {', '.join(names)}; "
            "name one with --campaign NAME"
        )

    def check_home(self) -> None:
        """Refuse a campaign folder that is not the one its manifest was written for
        (copied with ``cp -r``, or moved): its absolute ``source`` may still be the
        original's repository, so rounds would run git there and move the original's
        lineage.  ConfigError (exit 2) naming ``campaign relocate``."""
        home = self.manifest.campaign_dir
        if home is None or Path(home) == self.root:
            return
        raise ConfigError(
            f"the campaign folder {self.root} was written for {home}: it was copied or "
            f"moved, and its source: {self.manifest.source} may be the original's "
            "repository (this folder would run git there and move the original's "
            "lineage). If this folder is the one to go on with, point it at its own "
            "checkout: `campaign relocate --campaign "
            f"{self.name} --source PATH` (PATH may be the same source if only the folder "
            "moved); nothing was done"
        )

    def save_manifest(self) -> None:
        save_manifest(self.manifest_path, self.manifest)

    # -- the lock ---------------------------------------------------------------
    @contextmanager
    def lock(self) -> Iterator[None]:
        """Hold an exclusive ``flock`` on ``<root>/.lock``; fail at once when busy.
        Re-entrant on the same ``Campaign`` object."""
        if self._lock_depth:
            self._lock_depth += 1
            try:
                yield
            finally:
                self._lock_depth -= 1
            return
        fd = self._open_lock()
        try:
            self._acquire(fd)
            self._lock_depth = 1
            try:
                yield
            finally:
                self._lock_depth = 0
                os.ftruncate(fd, 0)  # nobody holds it: `campaign status` shows nothing running
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _open_lock(self) -> int:
        """The lock file's descriptor; a folder that cannot hold it (read-only, not
        yours, the lock path a directory) is a ConfigError saying what to do."""
        try:
            return os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise ConfigError(
                f"cannot take the campaign lock {self.lock_path} ({exc.strerror or exc}): "
                "every command that runs rounds or writes the report needs the campaign "
                "folder writable by you. Remount it read-write or fix its permissions, or "
                "copy the folder somewhere writable (then `campaign relocate` if its source "
                "moved too); `campaign status` only reads"
            ) from None

    def _acquire(self, fd: int) -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            holder = _parse_holder(os.pread(fd, 4096, 0).decode("utf-8", "replace"))
            pid, what = (holder.pid, f" (`{holder.command}`)") if holder else ("unknown", "")
            raise CampaignBusy(
                f"campaign {self.name} is busy (pid {pid}): another campaign command{what} "
                f"holds {self.lock_path}; wait for it to finish, then retry"
            ) from None
        os.ftruncate(fd, 0)
        about = json.dumps({"command": _command_line(), "started": now_second()})
        os.pwrite(fd, f"{os.getpid()}\n{about}\n".encode(), 0)

    def lock_holder(self) -> LockHolder | None:
        """The command that holds the campaign lock now (from what it wrote into the lock
        file, a live pid), or None.  Display only: nothing decides on it."""
        try:
            holder = _parse_holder(self.lock_path.read_text(encoding="utf-8", errors="replace"))
        except OSError:
            return None
        return holder if holder is not None and pid_alive(holder.pid) else None

    # -- rounds -------------------------------------------------------------------
    def save_result(self, result: RoundResult) -> None:
        """Write ``rounds/round-N/result.json`` atomically: the mark of a closed round."""
        payload = {"schema_version": RESULT_SCHEMA_VERSION, **result.to_dict()}
        text = json.dumps(payload, indent=2, ensure_ascii=False) + "\n"
        write_atomic(self.result_path(result.round), text)

    def load_result(self, n: int) -> RoundResult:
        path = self.result_path(n)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RoundOutOfOrder(
                f"round {n} of {self.name} is not closed ({path} is missing)"
            ) from None
        except json.JSONDecodeError as exc:
            raise RecordDamaged(f"{path} is not valid JSON ({exc}); restore it") from None
        version = data.pop("schema_version", None)
        require_schema_version(
            version,
            RESULT_SCHEMA_VERSION,
            str(path),
            older="read it with the turbo-campaign release that wrote it",
            newer="upgrade turbo-campaign (pip install -U turbo-campaign) to read it",
        )
        try:
            return RoundResult.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise RecordDamaged(f"{path} is malformed ({exc!r}); restore it") from None

    def closed_rounds(self) -> list[int]:
        if not self.rounds_dir.is_dir():
            return []
        found = []
        for p in self.rounds_dir.iterdir():
            num = p.name.removeprefix("round-")
            if p.name.startswith("round-") and num.isdigit() and (p / "result.json").is_file():
                found.append(int(num))
        return sorted(found)

    def next_round(self) -> int:
        closed = self.closed_rounds()
        return closed[-1] + 1 if closed else 1

    def results(self) -> list[RoundResult]:
        return [self.load_result(n) for n in self.closed_rounds()]

    def last_accepted(self) -> RoundResult | None:
        """The highest-numbered BASELINE or ACCEPTED round (the current best)."""
        for n in reversed(self.closed_rounds()):
            r = self.load_result(n)
            if r.status in (Status.BASELINE, Status.ACCEPTED):
                return r
        return None


def check_campaigns_root(campaigns_root: Path) -> None:
    """Refuse a campaigns root that is not a folder (a file, say: CAMPAIGN_ROOT pointing
    at one, or a file above it), with what to do (ConfigError, exit 2).  A missing one
    is fine: ``Campaign.init`` creates it."""
    for path in (campaigns_root, *campaigns_root.parents):
        if path.exists() and not path.is_dir():
            raise ConfigError(
                f"the campaigns root {campaigns_root} is not a folder ({path} is a file): "
                "point --campaigns-root or CAMPAIGN_ROOT at a folder (it is created when "
                "missing)"
            )


def _make_root(campaigns_root: Path) -> None:
    try:
        campaigns_root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"cannot create the campaigns root {campaigns_root} ({exc.strerror or exc}): "
            "point --campaigns-root or CAMPAIGN_ROOT at a folder you can write"
        ) from None


def _populate(root: Path, manifest: Manifest) -> None:
    for sub in ("logs", "profiles", "rounds"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    append(root / "logs" / "optimize.md", optimize_title(manifest))
    append(root / "logs" / "performance_trend.md", trend_header(manifest))
    write_atomic(root / MANIFEST_NAME, manifest_yaml(manifest))


def _create_atomically(root: Path, manifest: Manifest) -> None:
    """Build the directory under a temporary name, then rename it into place."""
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".init", dir=root.parent))
    try:
        _populate(tmp, manifest)
        os.rename(tmp, root)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if root.exists():
            raise ConfigError(f"{root} appeared while creating it; not overwritten") from exc
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    os.chmod(root, 0o755)
