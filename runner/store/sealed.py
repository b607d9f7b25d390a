"""The sealed held-out pick (docs/reliability.md §7 row 22).

The shapes final acceptance judges over-fitting on (docs/protocol.md §5.7) must stay
unknown to the code they judge until ``campaign accept``.  ``campaign init`` draws them
and keeps them in ``<campaign>/sealed/heldout.json`` (the labels, the seed of the draw
and a random nonce); ``manifest.yaml`` holds only their count and a digest of that file's
content.  The digest is salted by the nonce: the set's shapes are public, and without it
every combination of one to three of them could be hashed and matched.

No job reads the folder: a local job (and a Slurm task in its namespace) sees an empty,
read-only file system mounted over it (``runner.executors.isolation``: ``hidden``), a
container mounts only its own tree, spec and out folder.  ``campaign accept`` reads the
file, checks it against the manifest's digest and refuses a missing or changed one
(exit 5, saying what to do; nothing recorded is touched).

A campaign made before the seal lists its labels in ``manifest.yaml`` (``heldout_shapes``):
they are read from there, and said to be unsealed.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runner.core.errors import AppendOnlyViolation
from runner.core.files import read_bounded, write_atomic
from runner.store.manifest import Manifest

SEALED_DIR = "sealed"  # under the campaign folder; hidden from every job
HELDOUT_FILE = "heldout.json"
MAX_SEALED_BYTES = 64 * 1024


@dataclass(frozen=True)
class Sealed:
    """The sealed pick: its labels, the seed they were drawn with and the nonce that
    salts the digest."""

    labels: tuple[str, ...]
    seed: int | None
    nonce: str

    @classmethod
    def new(cls, labels: Sequence[str], seed: int | None) -> Sealed:
        return cls(tuple(sorted(labels)), seed, secrets.token_hex(16))

    def text(self) -> str:
        data = {"labels": list(self.labels), "seed": self.seed, "nonce": self.nonce}
        return json.dumps(data, indent=2, sort_keys=True) + "\n"

    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.text().encode("utf-8")).hexdigest()


def sealed_dir(campaign_root: Path) -> Path:
    return Path(campaign_root) / SEALED_DIR


def heldout_path(campaign_root: Path) -> Path:
    return sealed_dir(campaign_root) / HELDOUT_FILE


def write_sealed(campaign_root: Path, sealed: Sealed) -> None:
    """Write the sealed file (owner-only permissions); the manifest holds its digest."""
    folder = sealed_dir(campaign_root)
    folder.mkdir(mode=0o700, exist_ok=True)
    path = heldout_path(campaign_root)
    write_atomic(path, sealed.text())
    os.chmod(path, 0o600)


def is_sealed(m: Manifest) -> bool:
    return m.heldout_digest is not None


def heldout_labels(campaign_root: Path, m: Manifest) -> list[str]:
    """The held-out labels: from the sealed file, checked against the manifest's
    digest (``AppendOnlyViolation`` when it is missing or differs), or from the manifest
    of a campaign made before the seal."""
    if not is_sealed(m):
        return list(m.heldout_shapes)
    path = heldout_path(campaign_root)
    restore = (
        f"restore {path} from a copy of the campaign folder made before (its digest must "
        f"be the manifest's heldout_digest {m.heldout_digest}); the held-out pick cannot "
        "be drawn again without showing it to the rounds already run"
    )
    if not path.is_file():
        raise AppendOnlyViolation(f"the sealed held-out pick {path} is missing: {restore}")
    raw = read_bounded(
        path, "sealed held-out pick", max_bytes=MAX_SEALED_BYTES, max_line=MAX_SEALED_BYTES
    )
    text = raw.decode("utf-8", errors="replace")
    got = "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()
    if got != m.heldout_digest:
        raise AppendOnlyViolation(
            f"the sealed held-out pick {path} was changed (digest {got[:19]}..., the "
            f"manifest says {str(m.heldout_digest)[:19]}...): {restore}"
        )
    labels = json.loads(text)["labels"]
    return [str(lb) for lb in labels]
