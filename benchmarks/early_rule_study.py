"""How often the gate accepts an A/A, and a real gain, when a round is noisier than its
baseline: simulated rounds judged by ``runner.judge.gate.decide`` as
``runner.compare.loop.measure_and_judge`` runs it on the CPU (a first batch of
``--first`` pairs, then the fresh pairs the gate asks for, up to the measuring cap's
pair floor: ``CAP_PAIRS``, ``PROMISING_PAIRS`` while the paired gain's interval lies above
1%; the judgement at the floor is final).

Each pair's reading on each of three shapes is the true gain times lognormal noise:
``--pair-noise`` shared by the pair's shapes and half of it per shape (the model of
tests/test_gate.py).  sigma_G, which sets the threshold T = max(2%, 3 sigma_G), is
``--sigma-g``: the baseline's, which on a quiet 2-core host is well below a loaded
round's noise (the demo: sigma_G 1.35%, T 4.06%, while its A/A rounds showed 5.3-7.3% a
pair).  It judges with the ``runner`` of the tree it lies in: to compare with the gate
before 2312e40 (an early verdict on the merged aggregate alone), copy it into a
checkout of 28a97cc and run it there.

    python benchmarks/early_rule_study.py --trials 2000

Prints, per true gain, the verdicts as k of n and the median pairs used.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the tree it lies in

from runner.core.outcomes import Decision, GateResult, PairSample, Score, ShapeScore
from runner.core.stats import geomean
from runner.judge.gate import decide, promising
from runner.judge.measuring_caps import CAP_PAIRS, PROMISING_PAIRS

BEST = {"small": 100.0, "mid": 200.0, "large": 400.0}
GAINS = (0.0, 0.02, 0.12, -0.20)  # an A/A, a small gain, the demo's speed-up and slow-down


def _score(values: dict[str, float]) -> Score:
    shapes = tuple(ShapeScore(lb, "PASS", v) for lb, v in values.items())
    return Score("Combined Step TFLOPS", geomean(list(values.values())), shapes, len(shapes), 0)


def one_round(
    gain: float, noise: float, sigma_g: float, first: int, rng: random.Random
) -> tuple[GateResult, int]:
    """One simulated comparison: (its final GateResult, the pairs it used)."""

    def draw() -> PairSample:
        shift = gain + rng.gauss(0.0, noise)
        cand = {lb: v * math.exp(shift + rng.gauss(0.0, noise / 2)) for lb, v in BEST.items()}
        return PairSample(incumbent=dict(BEST), candidate=cand)

    pairs = [draw() for _ in range(first)]
    while True:
        n = len(pairs)
        merged = {
            lb: v * math.exp(sum(math.log(p.candidate[lb] / v) for p in pairs) / n)
            for lb, v in BEST.items()
        }
        gate = decide(_score(BEST), _score(merged), sigma_g=sigma_g, pairs=pairs)
        if gate.decision is not Decision.NEEDS_REMEASURE:
            return gate, n
        floor = PROMISING_PAIRS if promising(gate) else CAP_PAIRS
        if n >= floor:
            final: GateResult = decide(
                _score(BEST), _score(merged), sigma_g=sigma_g, pairs=pairs, final=True
            )
            return final, n
        pairs += [draw() for _ in range(min(max(gate.more_pairs, 1), floor - n))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--pair-noise", type=float, default=0.053)
    parser.add_argument("--sigma-g", type=float, default=0.0135)
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"pair noise {100 * args.pair_noise:.1f}%, sigma_G {100 * args.sigma_g:.2f}%, "
        f"first batch {args.first} pairs, {args.trials} rounds per gain"
    )
    print("| true gain | ACCEPTED | ROLLED BACK | median pairs |")
    print("|---|---|---|---|")
    for gain in GAINS:
        rng = random.Random(args.seed)
        verdicts: Counter[bool] = Counter()
        used = []
        for _ in range(args.trials):
            gate, n = one_round(gain, args.pair_noise, args.sigma_g, args.first, rng)
            verdicts[gate.decision.accepted] += 1
            used.append(n)
        used.sort()
        k = verdicts[True]
        print(
            f"| {100 * gain:+.0f}% | {k} of {args.trials} | {args.trials - k} of {args.trials} "
            f"| {used[len(used) // 2]} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
