"""Rule 6 of upstream's iteration rules (checked at Primus-Turbo a6a16cdc): correctness
before performance; "if correctness fails, fix before proceeding.  A round with broken
correctness is not a valid round."

A VALIDATE round whose only veto is its candidate's failed focused test is therefore
not closed: it is recorded as a failed attempt of the same round number under
``rounds/round-N/attempts/attempt-K/`` (its ``candidate.patch``, its
``kernel_snapshot/`` and ``attempt.json``: hypothesis, time, why) with one entry in
``logs/optimize.md`` (``#### round-N attempt K``, never a round's history marker), and
round N stays open for the fixed candidate.
It is no rollback: it does not count toward the escalation ladder, and the user's
checkout keeps the edit to fix.  ``CorrectnessFailed`` (exit 3) says so.  A round that
the audit also vetoes is judged as before (ROLLED BACK, closed): it tried a forbidden
change, not merely a broken one.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence

from runner.core.artifact_names import CANDIDATE_PATCH
from runner.core.errors import CorrectnessFailed
from runner.core.files import write_atomic, write_json_atomic
from runner.core.isa_facts import KernelFacts
from runner.core.timestamps import now_minute
from runner.render.kernel_facts import facts_lines
from runner.store.appendlog import append
from runner.store.campaign import Campaign
from runner.store.leftovers import ATTEMPT
from runner.store.log_format import optimize_title
from runner.store.roundfiles import ATTEMPTS, list_attempts

CORRECTNESS_VETO = "focused test failed on the candidate"


def correctness_only(reasons: Sequence[str]) -> bool:
    """Whether a vetoed gate's reasons are all the candidate's failed focused test."""
    return bool(reasons) and all(r.startswith(CORRECTNESS_VETO) for r in reasons)


def record_attempt(
    campaign: Campaign,
    n: int,
    hypothesis: str,
    patch: str,
    reasons: Sequence[str],
    facts: KernelFacts | None = None,
) -> CorrectnessFailed:
    """Record the failed attempt of open round ``n`` and return the error to raise; the
    round folder keeps only its attempts (the snapshot moves into the attempt; no
    result: the round is open).  ``facts``: both roles' kernel facts, kept in
    ``attempt.json`` and shown with the error (what the broken candidate compiled to)."""
    round_dir = campaign.round_dir(n)
    k = len(list_attempts(round_dir)) + 1
    dest = round_dir / ATTEMPTS / f"attempt-{k}"
    why = "\n".join(reasons)
    write_atomic(dest / CANDIDATE_PATCH, patch)
    record = {"round": n, "attempt": k, "when": now_minute(), "hypothesis": hypothesis, "why": why}
    if facts is not None:
        record["kernel_facts"] = facts.to_dict()
    write_json_atomic(dest / "attempt.json", record)
    for path in round_dir.iterdir():
        if path.name == "kernel_snapshot":  # Rule 5: kept for the post-mortem
            shutil.move(path, dest / "kernel_snapshot")
        elif path.name != ATTEMPTS:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    first = why.splitlines()[1] if len(why.splitlines()) > 1 else why
    append(
        campaign.optimize_log,
        f"\n#### round-{n} attempt {k} — correctness FAIL (Rule 6: not a round)\n"
        f"- Time: {now_minute()}\n- Hypothesis: {' '.join(hypothesis.split())}\n"
        f"- Test: FAIL ({' '.join(first.split())[:200]})\n"
        f"- Kept: rounds/round-{n}/{ATTEMPTS}/attempt-{k}/candidate.patch\n",
        expected_prefix=optimize_title(campaign.manifest),
    )
    (round_dir / ATTEMPT).unlink(missing_ok=True)
    return CorrectnessFailed(
        f"round-{n}: the candidate failed its focused test; recorded as failed attempt {k} "
        f"of round {n} ({dest}), not as a round (Rule 6: correctness before performance; "
        "it does not count toward escalation). Your edit is left in the checkout: fix it "
        f"and run `campaign validate --round {n}` again.\n{why}"
        + "".join(f"\n{line}" for line in facts_lines(facts))
    )
