"""The user's checkout around a VALIDATE round (docs/protocol.md §6.7; upstream's
iteration rules, Rule 3: on rollback the working kernel is the previous accepted
round's again, checked at Primus-Turbo a6a16cdc).

``plan_restore`` decides up front, before anything is written, whether a rollback will
put the checkout back: yes when the round's change is the checkout's edit (the default
round, or a ``--patch`` equal to the checkout's diff); no when the checkout holds none
of it (a clean checkout, or one not at the lineage) or the user said
``--keep-checkout``.  A checkout with edits that are not the round's change is refused:
a rollback could neither leave it alone honestly nor restore it without losing them.

``restore_checkout`` runs after a ROLLED BACK or FAILED verdict: the change is kept as
a commit on the head under ``refs/campaigns/<campaign>/rolled-back/round-N`` (beside
the round's ``candidate.patch``), then the touched files are the head's again; its
line for the round's reasons names both and the one command that brings the edit
back.  A checkout edited while the round ran is left as it is, and says so.
"""

from __future__ import annotations

from pathlib import Path

from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.errors import CheckoutOffLineage, ConfigError
from runner.store.campaign import Campaign
from runner.store.lineage import Lineage, patch_paths


def plan_restore(lineage: Lineage, patch: str, *, from_checkout: bool, restore: bool) -> bool:
    """Whether a rollback of this round restores the checkout (see the module)."""
    if not restore:
        return False
    if from_checkout:
        return True
    try:
        held = lineage.working_tree_patch()
    except CheckoutOffLineage:
        return False  # the checkout is not at the lineage: nothing of the round is in it
    if not held.strip():
        return False
    if lineage.tree_of(held) == lineage.tree_of(patch):
        return True
    raise ConfigError(
        f"the checkout {lineage.source} has uncommitted edits that are not this round's "
        f"change ({', '.join(patch_paths(held))}); a rollback puts the checkout back to "
        "the lineage head and would lose them, so nothing was run: commit or stash them "
        f"(git -C {lineage.source} stash), or pass --keep-checkout to leave the checkout "
        "as it is"
    )


def restore_checkout(
    campaign: Campaign, lineage: Lineage, round_n: int, patch: str, touched: list[str]
) -> str:
    """Keep the round's change under a ref, put the touched files of the checkout back
    to the head; returns the line for the round's reasons."""
    kept = campaign.round_dir(round_n) / CANDIDATE_PATCH
    ref = lineage.keep_change(
        f"rolled-back/round-{round_n}", patch, f"[rolled back] round-{round_n} of {campaign.name}"
    )
    try:
        held = lineage.tree_of(lineage.working_tree_patch())
    except CheckoutOffLineage:
        held = ""
    if held != lineage.tree_of(patch):
        return (
            f"the checkout changed while round-{round_n} ran: left as it is; the round's "
            f"change is kept as {kept} and {ref}"
        )
    lineage.restore_user_tree(touched)
    return (
        f"checkout restored: {', '.join(touched)} as the lineage head "
        f"{lineage.head()[:12]} has it (Rule 3); the failed edit is kept as {kept} and "
        f"{ref}; bring it back with: {bring_back(lineage.source, kept)}"
    )


def bring_back(source: Path, kept: Path) -> str:
    return f"git -C {source} apply {kept}"


def kept_note(round_n: int) -> str:
    """The reasons' line of a rolled-back round whose checkout was left as it is."""
    return (
        f"checkout left as it is (--keep-checkout): round-{round_n}'s edit is still in it; "
        "the next round without --patch would measure it again"
    )
