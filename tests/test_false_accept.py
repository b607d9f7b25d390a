"""The false-accept budget (``runner.judge.false_accept``): the tails it is built from,
each rule's bound, and the bound held against the gate itself, run on changes with no
gain through the sequential looks a measurement takes."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest
from test_campaign import result
from test_gate import BEST, make_score

from runner.core.outcomes import Decision, GateResult, PairSample, RoundResult, Status
from runner.judge.false_accept import (
    CAMPAIGN_BUDGET,
    against_what_is_left,
    attempt_bound,
    look_bound,
    looks_of,
    normal_tail,
    spent,
    t_tail,
)
from runner.judge.gate import decide


def test_the_tails_match_their_closed_forms() -> None:
    assert normal_tail(1.959964) == pytest.approx(0.025, abs=1e-6)
    assert normal_tail(0.0) == pytest.approx(0.5)
    for x in (0.0, 1.0, 3.0, 10.0):  # one degree of freedom: the Cauchy
        assert t_tail(x, 1) == pytest.approx(0.5 - math.atan(x) / math.pi, abs=1e-9)
    for x in (0.5, 2.0, 3.4641):  # two: 1/2 - x / (2 sqrt(2 + x^2))
        assert t_tail(x, 2) == pytest.approx(0.5 - x / (2 * math.sqrt(2 + x * x)), abs=1e-9)
    assert t_tail(2.0, 10) == pytest.approx(0.036694, abs=1e-6)  # a two-sided p of 0.0734
    with pytest.raises(ValueError, match="degree of freedom"):
        t_tail(1.0, 0)


def test_each_rule_s_bound() -> None:
    cut = math.log1p(0.02)
    # fewer pairs than the rules need: every pair beyond the threshold
    assert look_bound(2, 0.01, 0.02, 3) == pytest.approx(normal_tail(cut / 0.01) ** 2)
    # from the pairs the rules need: the paired rule (the mean beyond the threshold) and
    # the near-noise rule (the smaller of its two tails)
    floor = math.log1p(0.01)
    assert look_bound(6, 0.01, 0.02, 3) == pytest.approx(
        normal_tail(cut * math.sqrt(6) / 0.01) + normal_tail(floor * math.sqrt(6) / 0.01)
    )
    quiet, loud = look_bound(3, 0.003, 0.02, 3), look_bound(3, 0.05, 0.02, 3)
    assert quiet == pytest.approx(
        normal_tail(cut * math.sqrt(3) / 0.003) + normal_tail(floor * math.sqrt(3) / 0.003)
    )
    t_part = t_tail(2 * math.sqrt(3), 2)
    assert t_part == pytest.approx(0.0370, abs=1e-4)
    assert loud == pytest.approx(normal_tail(cut * math.sqrt(3) / 0.05) + t_part)
    with pytest.raises(ValueError, match="finite spread"):
        look_bound(3, 0.0, 0.02, 3)


def _pairs(gains: list[float]) -> list[PairSample]:
    return [
        PairSample(incumbent=dict(BEST), candidate={k: v * math.exp(g) for k, v in BEST.items()})
        for g in gains
    ]


def _judge(gains: list[float], final: bool) -> GateResult:
    merged = {k: v * math.exp(math.fsum(gains) / len(gains)) for k, v in BEST.items()}
    return decide(make_score(BEST), make_score(merged), pairs=_pairs(gains), final=final)


@pytest.mark.parametrize("spread", [0.006, 0.012, 0.02])
def test_the_bound_holds_against_the_gate_on_changes_with_no_gain(spread: float) -> None:
    """2,000 changes with no gain through the gate's own looks at 2, 3, 4, 6 and 8
    pairs (the first with fewer pairs than the rules need): the share ACCEPTED is at
    most the bound, within three standard errors of the count."""
    looks, draws, rng = (2, 3, 4, 6, 8), 2000, random.Random(20261207)
    accepted = 0
    for _ in range(draws):
        gains = [rng.gauss(0.0, spread) for _ in range(looks[-1])]
        for n in looks:
            gate = _judge(gains[:n], final=n == looks[-1])
            if gate.decision is not Decision.NEEDS_REMEASURE:
                accepted += gate.decision is Decision.ACCEPTED
                break
    rate = accepted / draws
    bound = min(1.0, math.fsum(look_bound(n, spread, 0.02, 3) for n in looks))
    assert rate <= bound + 3 * math.sqrt(bound * (1 - bound) / draws) + 1 / draws, (rate, bound)


def _gate(gains_pct: tuple[float, ...], looks: tuple[int, ...] = ()) -> GateResult:
    return GateResult(
        Decision.ROLLED_BACK,
        "tflops",
        1.0,
        1.0,
        0.0,
        (),
        (),
        (),
        threshold_pct=2.0,
        pairs_used=len(gains_pct),
        pair_gains_pct=gains_pct,
        looks=looks,
    )


def test_an_attempt_s_bound_reads_its_record() -> None:
    gains = (0.4, -0.3, 0.1, -0.6, 0.2, 0.3)
    recorded = attempt_bound(_gate(gains, looks=(3, 6)))
    assumed = attempt_bound(_gate(gains))  # every count from the rules' first look
    assert recorded is not None and assumed is not None and 0 < recorded < assumed < 0.01
    assert looks_of(_gate(gains), 3) == (3, 4, 5, 6)
    assert looks_of(_gate(gains[:2]), 3) == (2,)
    assert attempt_bound(None) is None  # vetoed or failed: never judged on pairs
    assert attempt_bound(_gate((1.0,))) is None  # one pair: no spread to read
    # the gate's JSON carries the looks; a record without them reads as before
    gate = _gate(gains, looks=(3, 6))
    assert GateResult.from_dict(gate.to_dict()) == gate
    assert "looks" not in _gate(gains).to_dict()


def test_the_campaign_s_spending_sums_its_attempts_and_says_when_it_is_spent() -> None:
    quiet = spent([(2, _gate((0.1, -0.1, 0.05), (3,))), (3, None)])
    assert [n for n, _ in quiet.attempts] == [2] and not quiet.over
    assert quiet.line().startswith("false-accept budget: ") and "1 judged attempt" in quiet.line()
    noisy = tuple(float(x) for x in (3.0, -2.5, 2.8, -3.1))
    loud = spent([(n, _gate(noisy, (2, 3, 4))) for n in range(2, 40)])
    assert loud.over and loud.total > CAMPAIGN_BUDGET and "SPENT" in loud.line()
    assert "`campaign accept`" in loud.line()
    assert loud.to_dict()["over"] is True
    assert spent([]).line().endswith("(no attempt judged on pairs yet)")


def test_a_resubmission_is_judged_against_what_is_left_of_the_budget() -> None:
    """``validate --resubmit``: an accepting reading of code a rolled-back round ran
    stands only where its own bound fits in what the campaign's earlier judged rounds
    left of the budget; a verdict that does not accept is left as it is."""
    clear = replace(_gate((9.0, 9.5, 10.0, 9.2), (3, 4)), decision=Decision.ACCEPTED)
    close = replace(_gate((3.0, 1.5, 3.5), (2, 3)), decision=Decision.ACCEPTED)
    small, large = attempt_bound(clear), attempt_bound(close)
    assert small is not None and large is not None and small < 1e-4 < 0.01 < large < 0.05

    def judged(n: int, gate: GateResult) -> RoundResult:
        return replace(result(n, Status.ROLLED_BACK), gate=gate)

    fresh = [result(1, Status.BASELINE)]
    for gate in (clear, close):  # a campaign that spent nothing: both fit
        kept = against_what_is_left(gate, 2, fresh)
        assert kept.decision is Decision.ACCEPTED and kept.reasons[:-1] == gate.reasons
        assert "resubmission of round-2's code" in kept.reasons[-1]
        assert "fits in the 5.00%" in kept.reasons[-1]
    # an earlier judged round that spent most of it leaves less than the close one needs
    before = _gate((3.0, 1.5, 3.5), (2, 3))  # the close reading, rolled back once before
    spending = [*fresh, judged(2, before)]
    left = CAMPAIGN_BUDGET - spent([(2, before)]).total
    assert 0 < left < large
    refused = against_what_is_left(close, 2, spending)
    assert refused.decision is Decision.ROLLED_BACK and refused.reasons[1:] == close.reasons
    assert refused.reasons[0].startswith("ROLLED BACK as a resubmission of round-2's code")
    assert (
        "more than the 1.19% left of the campaign's 5.00% false-accept budget"
        in (refused.reasons[0])
    )
    # a reading that rolled back, and one with no bound (one pair), are not accepted by it
    assert against_what_is_left(before, 2, spending) is before
    one = replace(_gate((20.0,)), decision=Decision.ACCEPTED)
    assert against_what_is_left(one, 2, fresh).decision is Decision.ROLLED_BACK
