"""``campaign status``: where a campaign stands (docs/protocol.md §6.6 and §7.1).

The current best and its gain over the baseline, rounds accepted / rolled back /
failed, the consecutive rollbacks with the escalation step they call for, the next
round number, any unclosed round (a ``rounds/round-N`` folder without
``result.json``) with the step where it stopped, the chain integrity check (the
append-only records against their ledgers, by file and byte range, and the
accepted rounds' aggregates, and the manifest's gate fields against their ledger:
"not ledgered" for a campaign made before they were), and what a killed command left
behind (stale workers, folders, partial files).  Pure functions on a list of
``RoundResult`` do the work; ``collect_status`` only reads the campaign.

A FAILED round (the measurement did not complete) counts toward the consecutive
rollbacks: the lineage did not move, and the escalation ladder starts with "diagnose".

GPU leases held on this host (by any campaign) are listed as ``gpu leases`` lines,
placed under ``"extra"`` in ``--json``, and so is the native build cache of the campaigns
root (``runner.executors.build_cache``) as ``build cache`` lines.

At a glance besides: the table of rounds (number, decision, gain with its ± over the
pairs, the hypothesis cut at a word boundary), sigma_G with the acceptance threshold in
force (docs/protocol.md §5.3), the command that holds the campaign lock now (its next
step waits for it), the last final acceptance (``acceptance/acceptance.json``) and
whether the source checkout's HEAD is the lineage head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from tabulate import tabulate

from runner.core.errors import CampaignError
from runner.core.outcomes import GateResult, RoundResult, Status
from runner.core.step_times import StepTimes, read_step_times
from runner.executors.build_cache import BuildCache
from runner.judge.false_accept import Spent, campaign_spent
from runner.judge.gate import accept_threshold
from runner.judge.inconclusive import advice, inconclusive
from runner.render.analysis_status import analysis_lines
from runner.render.chain import check_chain
from runner.render.figures import fmt_gain, scale_for, short_text
from runner.render.headline import Headline, headline_gain
from runner.render.markdown import INCUMBENT
from runner.render.termination import campaign_termination, consecutive_rollbacks
from runner.store.acceptance import AcceptanceDict, load_acceptance
from runner.store.campaign import Campaign
from runner.store.gate_ledger import check_gate_fields, describe_constants
from runner.store.gate_ledger import describe as describe_gate_fields
from runner.store.guard import check_records, lineage_behind
from runner.store.leases import list_leases
from runner.store.leftovers import describe_attempt, describe_leftovers
from runner.store.lineage import Lineage
from runner.store.manifest import branch_name
from runner.store.roundfiles import describe_attempts, has_diagnosis
from runner.store.tips import read_tips, resolve_tips_root, tips_path

# Rule 7's escalation table in upstream's words (iteration_rules.mdc, checked at
# Primus-Turbo a6a16cdc), each led by the name of the step due.
ESCALATION: dict[int, str] = {
    1: "re-analyse: diagnose the failure, try another approach to the same bottleneck",
    2: "profile: stagnation review, full re-profile of the representative shapes "
    "(rocprofv3 + rocprof-compute), re-classify the bottleneck before the next hypothesis",
    3: "ISA: inspect the generated ISA of the kernel (register pressure, spills, MFMA use, "
    "waits), compare against a reference before the next hypothesis",
    4: "state of the art: compare with the state-of-the-art kernel for this op and consider "
    "a fundamentally different approach",
}


def lease_lines() -> list[tuple[str, str]]:
    """One line per GPU that has a lease file on this host (free or held)."""
    return [("gpu lease", info.describe()) for info in list_leases()]


def escalation_step(rollbacks: int) -> tuple[int, str] | None:
    """docs/protocol.md §7.1: the step for ``rollbacks`` consecutive rollbacks (4+ stays
    at step 4); None when the last round was accepted."""
    if rollbacks <= 0:
        return None
    step = min(rollbacks, 4)
    return step, ESCALATION[step]


def best_round(results: Sequence[RoundResult]) -> RoundResult | None:
    kept = [r for r in results if r.status in (Status.BASELINE, Status.ACCEPTED)]
    return max(kept, key=lambda r: r.round) if kept else None


class RoundRow(TypedDict):
    """One closed round in the status table (``round_rows``)."""

    round: int
    status: str
    decision: str | None
    inconclusive: str | None
    delta_pct: float | None
    gain: str | None
    hypothesis: str
    tournament: str | None


class Running(TypedDict):
    """The command holding the campaign lock."""

    pid: int
    command: str
    started: str


class AcceptanceFacts(TypedDict, total=False):
    """The last final acceptance, as the status shows it (``acceptance_facts``)."""

    outcome: str
    finished: str
    head: str
    reasons: list[str]
    gain: str | None


class CheckoutFacts(TypedDict, total=False):
    """The source checkout against the lineage head (``checkout_facts``)."""

    at_head: bool | None
    head: str | None
    checkout: str | None
    note: str


class Glance(TypedDict):
    """What ``glance`` returns."""

    sigma_g: float | None
    threshold_pct: float | None
    running: Running | None
    acceptance: AcceptanceFacts | None
    checkout: CheckoutFacts


@dataclass
class CampaignStatus:
    campaign: str
    root: str
    metric: str | None
    baseline_aggregate: float | None
    best_round: int | None
    best_aggregate: float | None
    gain_pct: float | None  # the headline gain (runner.render.headline); None: none accepted
    accepted: int
    rolled_back: int
    failed: int
    consecutive_rollbacks: int
    escalation: tuple[int, str] | None
    next_round: int
    unclosed: list[int]
    chain_problems: list[str]
    extra: list[tuple[str, str]] = field(default_factory=list)
    record_problems: list[str] = field(default_factory=list)
    unclosed_why: dict[int, str] = field(default_factory=dict)
    leftovers: list[str] = field(default_factory=list)
    headline_rounds: list[int] = field(default_factory=list)
    gate_fields: str = ""  # runner.store.gate_ledger.describe
    gate_constants: str = ""  # runner.store.gate_ledger.describe_constants
    round_table: list[RoundRow] = field(default_factory=list)  # round_rows
    sigma_g: float | None = None
    threshold_pct: float | None = None  # max(2%, 3 sigma_G), docs/protocol.md §5.3
    running: Running | None = None  # the campaign lock's holder: pid, command, started
    acceptance: AcceptanceFacts | None = None  # the last `campaign accept`: see acceptance_facts
    checkout: CheckoutFacts = field(default_factory=CheckoutFacts)  # see checkout_facts
    # the termination check after the last round (runner.render.termination): its lines
    termination: list[str] = field(default_factory=list)
    may_end: bool = False  # some of T1-T4 holds
    undiagnosed: list[int] = field(default_factory=list)  # rollbacks in a row, no diagnosis
    # the wall time of each step (runner.core.step_times) of the BASELINE, of the last
    # round and of the last acceptance, where they recorded it
    step_times: dict[str, StepTimes] = field(default_factory=dict)
    # what the judged attempts spent of the false-accept budget (runner.judge.false_accept)
    false_accept: Spent = field(default_factory=lambda: Spent(()))

    def to_dict(self) -> dict[str, object]:
        step = self.escalation
        return {
            "campaign": self.campaign,
            "root": self.root,
            "metric": self.metric,
            "baseline_aggregate": self.baseline_aggregate,
            "best_round": self.best_round,
            "best_aggregate": self.best_aggregate,
            "gain_pct": self.gain_pct,
            "headline_rounds": list(self.headline_rounds),
            "rounds": {
                "accepted": self.accepted,
                "rolled_back": self.rolled_back,
                "failed": self.failed,
            },
            "consecutive_rollbacks": self.consecutive_rollbacks,
            "escalation": {"step": step[0], "action": step[1]} if step else None,
            "next_round": self.next_round,
            "unclosed_rounds": list(self.unclosed),
            "unclosed_why": {str(k): v for k, v in self.unclosed_why.items()},
            "chain_ok": not self.chain_problems and not self.record_problems,
            "chain_problems": list(self.chain_problems),
            "record_problems": list(self.record_problems),
            "leftovers": list(self.leftovers),
            "gate_fields": self.gate_fields,
            "gate_constants": self.gate_constants,
            "round_table": [dict(row) for row in self.round_table],
            "sigma_g": self.sigma_g,
            "threshold_pct": self.threshold_pct,
            "running": self.running,
            "acceptance": self.acceptance,
            "checkout": dict(self.checkout),
            "termination": {"lines": list(self.termination), "may_end": self.may_end},
            "undiagnosed": list(self.undiagnosed),
            "step_times": {k: v.to_dict() for k, v in self.step_times.items()},
            "false_accept": self.false_accept.to_dict(),
            "extra": {k: v for k, v in self.extra},
        }


def summarise(
    name: str, root: str, results: Sequence[RoundResult], unclosed: Sequence[int] = ()
) -> CampaignStatus:
    """The status of a campaign from its closed rounds (pure)."""
    base = next((r for r in results if r.status is Status.BASELINE), None)
    best = best_round(results)
    count = {s: sum(1 for r in results if r.status is s) for s in Status}
    closed = [r.round for r in results]
    rollbacks = consecutive_rollbacks(results)
    headline = headline_gain(results)
    return CampaignStatus(
        campaign=name,
        root=root,
        metric=base.score.metric if base else None,
        baseline_aggregate=base.score.aggregate if base else None,
        best_round=best.round if best else None,
        best_aggregate=best.score.aggregate if best else None,
        gain_pct=headline.pct_or_none,
        headline_rounds=list(headline.rounds),
        accepted=count[Status.ACCEPTED],
        rolled_back=count[Status.ROLLED_BACK],
        failed=count[Status.FAILED],
        consecutive_rollbacks=rollbacks,
        escalation=escalation_step(rollbacks),
        next_round=max(closed) + 1 if closed else 1,
        unclosed=sorted(unclosed),
        chain_problems=check_chain(results),
        round_table=round_rows(results),
        step_times=_step_times(base, max(results, key=lambda r: r.round, default=None)),
        false_accept=campaign_spent(results),
    )


def _step_times(base: RoundResult | None, last: RoundResult | None) -> dict[str, StepTimes]:
    """The BASELINE's and the last round's step times, where recorded."""
    found = {"baseline": base, "last_round": last}
    return {k: r.step_times for k, r in found.items() if r is not None and r.step_times}


def round_rows(results: Sequence[RoundResult]) -> list[RoundRow]:
    """One row per closed round: number, status, the gate's decision, the gain against
    the incumbent with its ± over the pairs (``gain``, as every table writes it), the
    hypothesis cut at a word boundary, and on a tournament's last round its line."""
    return [
        {
            "round": r.round,
            "status": r.status.value,
            "decision": r.gate.decision.value if r.gate else None,
            # a verdict too noisy to tell (runner.judge.inconclusive): what it is, in words
            "inconclusive": noisy.line() if (noisy := inconclusive(r.gate)) else None,
            "delta_pct": r.gate.delta_pct if r.gate else None,
            "gain": fmt_gain(r.gate.delta_pct, r.gate) if r.gate else None,
            "hypothesis": short_text(r.hypothesis or r.description),
            # a tournament's line, on its last round's row (which won and why)
            "tournament": r.tournament.line
            if r.tournament is not None and r.round == r.tournament.last
            else None,
        }
        for r in sorted(results, key=lambda r: r.round)
    ]


def acceptance_facts(acceptance: AcceptanceDict | None) -> AcceptanceFacts | None:
    """The last final acceptance: outcome, when, why not, its paired head-vs-base gain."""
    if acceptance is None:
        return None
    gate = GateResult.from_dict(recorded) if (recorded := acceptance.get("gate")) else None
    return {
        "outcome": acceptance["outcome"],
        "finished": acceptance.get("finished", ""),
        "head": acceptance.get("head", ""),
        "reasons": list(acceptance.get("reasons", [])),
        "gain": fmt_gain(gate.delta_pct, gate) if gate else None,
    }


def checkout_facts(campaign: Campaign) -> CheckoutFacts:
    """The source checkout's HEAD against the lineage head: ``at_head``, both commits,
    and ``note`` in words (what `validate` will make of it)."""
    m = campaign.manifest
    lineage = Lineage(Path(m.source), campaign.name, branch_name(m))
    try:
        head = lineage.head()
        at = lineage.git("rev-parse", "--verify", "-q", "HEAD", check=False)
    except CampaignError as exc:
        return {"at_head": None, "head": None, "checkout": None, "note": str(exc)}
    facts: CheckoutFacts = {"at_head": at == head, "head": head, "checkout": at or None}
    if at == head:
        facts["note"] = f"at the lineage head {head[:12]}"
        return facts
    try:
        lineage.check_checkout()
        facts["note"] = (
            f"HEAD {at[:12]} is on top of the lineage head {head[:12]}: its commits and "
            "edits are the next round's change (validate diffs against the head)"
            if at and lineage.descends(at, head)
            else f"HEAD {at[:12]} is behind the lineage head {head[:12]}; its working tree "
            "carries the accepted changes (validate diffs against the head)"
        )
    except CampaignError as exc:
        facts["note"] = f"HEAD {(at or 'none')[:12]} is not the lineage head {head[:12]}: {exc}"
    return facts


def unclosed_rounds(campaign: Campaign) -> list[int]:
    """``rounds/round-N`` folders without ``result.json`` (an interrupted round)."""
    if not campaign.rounds_dir.is_dir():
        return []
    closed = set(campaign.closed_rounds())
    found = []
    for p in campaign.rounds_dir.iterdir():
        num = p.name.removeprefix("round-")
        if p.is_dir() and p.name.startswith("round-") and num.isdigit() and int(num) not in closed:
            found.append(int(num))
    return sorted(found)


def _acceptance_times(campaign: Campaign) -> StepTimes | None:
    """The last acceptance's step times; None without them (or an unreadable record,
    which ``glance`` reports)."""
    try:
        record = load_acceptance(campaign)
    except CampaignError:
        return None
    return read_step_times(record.get("step_times")) if record else None


def glance(campaign: Campaign) -> Glance:
    """The at-a-glance facts `campaign status` and the MCP ``campaign_status`` tool
    share: sigma_G and the acceptance threshold in force, the command holding the
    campaign lock, the last final acceptance, the checkout against the lineage head."""
    sigma = campaign.manifest.sigma_g
    holder = campaign.lock_holder()
    running: Running | None = None
    if holder is not None:
        running = {"pid": holder.pid, "command": holder.command, "started": holder.started}
    acceptance: AcceptanceFacts | None
    try:
        acceptance = acceptance_facts(load_acceptance(campaign))
    except CampaignError as exc:
        acceptance = {"outcome": "unreadable", "reasons": [str(exc)]}
    return {
        "sigma_g": sigma,
        "threshold_pct": 100 * accept_threshold(sigma) if sigma is not None else None,
        "running": running,
        "acceptance": acceptance,
        "checkout": checkout_facts(campaign),
    }


def collect_status(campaign: Campaign) -> CampaignStatus:
    results = campaign.results()
    status = summarise(campaign.name, str(campaign.root), results, unclosed_rounds(campaign))
    status.record_problems = check_records(campaign) + check_gate_fields(campaign)
    status.gate_fields = describe_gate_fields(campaign)
    status.gate_constants = describe_constants(campaign)
    status.unclosed_why = {
        n: describe_attempts(campaign.round_dir(n)) or describe_attempt(campaign.round_dir(n))
        for n in status.unclosed
    }
    status.leftovers = describe_leftovers(
        campaign.root, campaign.name, Path(campaign.manifest.source)
    )
    try:
        behind = lineage_behind(campaign)
    except CampaignError:
        behind = None
    if behind:
        status.leftovers.insert(0, f"lineage: {behind}")
    status.extra.extend(lease_lines())
    streak = sorted(results, key=lambda r: r.round)[-status.consecutive_rollbacks :]
    status.undiagnosed = [
        r.round
        for r in (streak if status.consecutive_rollbacks else [])
        if not has_diagnosis(campaign.round_dir(r.round))
    ]
    facts = glance(campaign)
    status.sigma_g, status.threshold_pct = facts["sigma_g"], facts["threshold_pct"]
    status.running, status.acceptance = facts["running"], facts["acceptance"]
    accepted = _acceptance_times(campaign)
    if accepted is not None:
        status.step_times["acceptance"] = accepted
    status.checkout = facts["checkout"]
    if status.baseline_aggregate is not None:
        check = campaign_termination(campaign, results)
        status.termination, status.may_end = check.lines(), bool(check.held)
    status.extra.extend(BuildCache.for_campaign(campaign.root).status_lines())
    status.extra.append(tips_line(campaign))
    status.extra.extend(  # docs/analysis.md §4: profile after 2 rollbacks, ISA after 3
        analysis_lines(campaign.results(), status.consecutive_rollbacks, campaign.name)
    )
    return status


def tips_line(campaign: Campaign) -> tuple[str, str]:
    """Where the historical tips of this campaign's GPU, op and backend are (upstream's
    ``agent/historical_experience`` path in an upstream checkout), and how many entries
    they hold: upstream's READ_HISTORICAL_TIPS, shown beside every status."""
    root = resolve_tips_root(campaign.root.parent, None)
    path = tips_path(campaign.manifest, root)
    text = read_tips(campaign.manifest, root)
    if text is None:
        return "tips", f"none yet at {path} (`campaign tip` appends there)"
    entries = sum(1 for line in text.splitlines() if line.startswith(("### ", "- ")))
    return "tips", f"{path}: {entries} entr{'y' if entries == 1 else 'ies'} (read them)"


def _best_line(s: CampaignStatus) -> str:
    if s.best_round is None:
        return "no baseline yet: run `campaign baseline`"
    scale = scale_for(s.metric or "", [s.best_aggregate, s.baseline_aggregate])
    metric = scale.label(s.metric or "")
    if s.best_round == 1:
        return (
            f"round-1 (baseline), {metric} geomean {scale.value(s.best_aggregate)} as "
            "measured at the baseline (a round's summary compares its candidate with "
            f"{INCUMBENT}: the same code measured beside it)"
        )
    return (
        f"round-{s.best_round}, {metric} geomean {scale.value(s.best_aggregate)} "
        f"as measured in its round (the baseline's: {scale.value(s.baseline_aggregate)})"
    )


def _headline_line(s: CampaignStatus) -> str:
    return Headline(s.gain_pct or 0.0, tuple(s.headline_rounds)).describe()


def _escalation_line(s: CampaignStatus) -> str:
    if s.escalation is None:
        return "none (the last round was accepted)" if s.best_round else "none"
    step, action = s.escalation
    return f"step {step}: {action}"


def _next_line(s: CampaignStatus) -> str:
    if s.running:
        return f"wait: `{s.running['command']}` holds the campaign; then {_after(s)}"
    return _after(s)


def _after(s: CampaignStatus) -> str:
    if s.unclosed and s.unclosed[0] == 1:
        return "round-1 (the baseline) is unclosed: re-run `campaign baseline` to close it"
    if s.unclosed:
        n = s.unclosed[0]
        return (
            f"round-{n} is unclosed (rounds/round-{n} has no result.json): re-run "
            f"`campaign validate --round {n}` to measure and close it"
        )
    if s.next_round == 1:
        return "round-1: `campaign baseline`"
    return f"round-{s.next_round}: `campaign validate --round {s.next_round} --hypothesis ...`"


def _decision_cell(row: RoundRow) -> str:
    if not row["decision"]:
        return "—"
    return row["decision"] + (" (too noisy to tell)" if row.get("inconclusive") else "")


def _table(s: CampaignStatus) -> list[str]:
    rows = [
        [f"round-{r['round']}", r["status"], _decision_cell(r), r["gain"] or "—", r["hypothesis"]]
        for r in s.round_table
    ]
    if not rows:
        return []
    headers = ["Round", "Status", "Decision", "Gain vs incumbent", "Hypothesis"]
    text = tabulate(rows, headers=headers, tablefmt="simple", disable_numparse=True)
    tournaments = [r["tournament"] for r in s.round_table if r.get("tournament")]
    return [f"  {line}" for line in [*text.splitlines(), *tournaments]] + _noisy_lines(s)


def _noisy_lines(s: CampaignStatus) -> list[str]:
    """The rounds too noisy to tell, each in words, and what to do once."""
    noisy = [r for r in s.round_table if r.get("inconclusive")]
    if not noisy:
        return []
    lines = [f"round-{r['round']} {r['status']}: {r['inconclusive']}" for r in noisy]
    return [*lines, f"what to do: {advice(noisy[-1]['round'])}"]


def _noise_line(s: CampaignStatus) -> str:
    if s.sigma_g is None or s.threshold_pct is None:
        return "not calibrated yet (the baseline measures sigma_G)"
    return (
        f"sigma_G {s.sigma_g:.3%}; acceptance threshold in force max(2%, 3 sigma_G) = "
        f"{s.threshold_pct:.3f}% (docs/protocol.md §5.3)"
    )


def _running_line(s: CampaignStatus) -> str:
    if not s.running:
        return "nothing (no command holds the campaign lock)"
    r = s.running
    return f"`{r['command']}` (pid {r['pid']}, since {r['started'] or 'unknown'})"


def _acceptance_line(s: CampaignStatus) -> str:
    a = s.acceptance
    if a is None:
        return "not run (`campaign accept`)"
    why = "; ".join(a.get("reasons") or []) or "every check passed"
    gain = f", head vs base {a['gain']}" if a.get("gain") else ""
    return f"{a['outcome']} ({a.get('finished') or 'unknown'}{gain}): {why}"


def render_status(s: CampaignStatus) -> str:
    """The human-readable status, one fact per line (the rounds as a table)."""
    problems = [*s.record_problems, *s.chain_problems]
    chain = "OK" if not problems else "BROKEN — " + "; ".join(problems)
    lines = [
        f"campaign: {s.campaign} ({s.root})",
        f"current best: {_best_line(s)}",
        f"headline gain: {_headline_line(s)}",
        f"rounds: {s.accepted} accepted, {s.rolled_back} rolled back, {s.failed} failed",
        *_table(s),
        f"noise: {_noise_line(s)}",
        s.false_accept.line(),
        f"running: {_running_line(s)}",
        f"last acceptance: {_acceptance_line(s)}",
        *([f"checkout: {s.checkout['note']}"] if s.checkout else []),
        f"consecutive rollbacks: {s.consecutive_rollbacks}",
        f"escalation: {_escalation_line(s)}",
        *(
            [
                f"undiagnosed rollbacks: {', '.join(f'round-{n}' for n in s.undiagnosed)} (Rule 7: "
                "give --root-cause and --lesson with the next validate)"
            ]
            if s.undiagnosed
            else []
        ),
        f"next: {_next_line(s)}",
        *(
            ["termination check:", *(f"  {line}" for line in s.termination)]
            if s.termination
            else []
        ),
        f"unclosed rounds: {', '.join(f'round-{n}' for n in s.unclosed) or 'none'}",
        *(f"round-{n} stopped: {why}" for n, why in sorted(s.unclosed_why.items())),
        f"chain integrity: {chain}",
        *([f"gate fields: {s.gate_fields}"] if s.gate_fields else []),
        *([f"gate constants: {s.gate_constants}"] if s.gate_constants else []),
        *s.leftovers,
    ]
    lines += [f"{key}: {line}" for key, line in s.extra]
    return "\n".join(lines)
