"""The environment fingerprint of every round, and the refusal to compare rounds
measured on different environments.

``record_fingerprint`` writes ``rounds/round-N/artifacts/fingerprint.yaml``.  It must
describe the environment the measurement ran in.  For the local executor that is this
host.  For docker it would be the inside of the container; for now the host's
fingerprint is recorded together with the image digest (``image_digest``), and
``extra.measured_in`` says which of the two it is.

``check_round_comparable`` compares the stored fingerprint of the current best round
with a fresh one and raises ``FingerprintMismatch`` (exit 2) naming every
performance-relevant difference, unless an override reason is given; the reason is
then kept in the round's artifacts (``fingerprint_override.txt``, appended).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from runner.core.errors import CampaignError
from runner.core.files import write_atomic
from runner.store.campaign import Campaign
from runner.store.fingerprint import (
    FingerprintDiff,
    collect_fingerprint,
    image_digest,
    load_fingerprint,
    require_comparable,
    write_fingerprint,
)
from runner.store.manifest import Manifest

log = logging.getLogger("runner.store.fingerprint_check")

FINGERPRINT_NAME = "fingerprint.yaml"
OVERRIDE_NAME = "fingerprint_override.txt"


def fingerprint_path(campaign: Campaign, n: int) -> Path:
    return campaign.artifacts_dir(n) / FINGERPRINT_NAME


def measurement_extra(campaign: Campaign, target_commit: str | None) -> dict[str, object]:
    """What the fingerprint says about the measurement besides the machine."""
    m = campaign.manifest
    inside = "host" if m.executor == "local" else f"host (executor {m.executor}, image {m.image})"
    return {
        "campaign": m.campaign_name,
        "target": m.target,
        "target_commit": target_commit,
        "executor": m.executor,
        "measured_in": inside,
    }


def image_digest_for(m: Manifest) -> str | None:
    """The local id of the campaign's image for the docker executor, else None."""
    if m.executor != "docker" or not m.image:
        return None
    try:
        return image_digest(m.image_id or m.image)
    except CampaignError as exc:
        log.warning("cannot read the digest of image %s: %s", m.image, exc)
        return None


def fresh_fingerprint(
    campaign: Campaign, *, image_digest: str | None = None, target_commit: str | None = None
) -> dict[str, object]:
    """This environment's fingerprint, as ``record_fingerprint`` would write it; for
    the docker executor the image digest is looked up when not given."""
    extra = measurement_extra(campaign, target_commit)
    digest = image_digest or image_digest_for(campaign.manifest)
    return collect_fingerprint(image_digest=digest, extra=extra)


def record_fingerprint(
    campaign: Campaign,
    n: int,
    *,
    image_digest: str | None = None,
    target_commit: str | None = None,
) -> Path:
    """Write round ``n``'s ``artifacts/fingerprint.yaml`` and return its path."""
    fp = fresh_fingerprint(campaign, image_digest=image_digest, target_commit=target_commit)
    path = fingerprint_path(campaign, n)
    write_fingerprint(path, fp)
    return path


def stored_fingerprint(campaign: Campaign, n: int) -> dict[str, object] | None:
    """Round ``n``'s fingerprint, or None for a round recorded before fingerprints."""
    path = fingerprint_path(campaign, n)
    return load_fingerprint(path) if path.is_file() else None


def check_round_comparable(
    campaign: Campaign,
    n_best: int,
    override_reason: str | None = None,
    *,
    record_in: int | None = None,
    image_digest: str | None = None,
    fresh: Mapping[str, object] | None = None,
) -> list[FingerprintDiff]:
    """Refuse to compare against round ``n_best`` when this environment differs from
    the one that measured it in a performance-relevant field.

    Raises ``FingerprintMismatch`` (a ConfigError, exit 2) naming each difference
    unless ``override_reason`` is given.  With an override and ``record_in`` the
    reason and the differences are appended to that round's
    ``artifacts/fingerprint_override.txt``; without ``record_in`` the caller records
    them later with ``record_override``.  A best round without a stored fingerprint
    (recorded before fingerprints existed) cannot be checked: [] and a log line."""
    stored = stored_fingerprint(campaign, n_best)
    if stored is None:
        log.info("round-%d has no fingerprint.yaml; environment not checked", n_best)
        return []
    now = fresh if fresh is not None else fresh_fingerprint(campaign, image_digest=image_digest)
    diffs = require_comparable(stored, now, override_reason=override_reason)
    blocking = [d for d in diffs if d.perf_relevant]
    if blocking and override_reason and record_in is not None:
        record_override(campaign, record_in, override_reason, blocking, n_best)
    return diffs


def record_override(
    campaign: Campaign,
    n: int,
    reason: str,
    diffs: list[FingerprintDiff],
    n_best: int,
) -> Path:
    """Append why round ``n`` was compared despite environment differences."""
    path = campaign.artifacts_dir(n) / OVERRIDE_NAME
    lines = [
        f"compared with round-{n_best} despite {len(diffs)} environment difference(s)",
        f"reason: {reason.strip()}",
        *(f"  {d.key}: {d.a!r} (round-{n_best}) vs {d.b!r} (now)" for d in diffs),
    ]
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, old + "\n".join(lines) + "\n\n")
    return path
