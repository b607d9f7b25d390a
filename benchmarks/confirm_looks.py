"""How often a tournament's confirmation would confirm an identical candidate
(``runner.judge.gate.confirms``, its interval rule), by simulation: each fresh paired
gain drawn from a normal law with mean 0 and the given spread a pair, looked at after
2, 4, 8, 16 and 24 pairs (the sequential measurement at most doubles its pairs, up to
``PROMISING_PAIRS``); a measurement confirms at the first look whose whole 95% Student-t
interval lies above the near-noise floor (1%).  Not a test; docs/protocol.md §1.5
quotes its figures.

    python benchmarks/confirm_looks.py
"""

from __future__ import annotations

import math
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runner.judge.evidence import FLOOR_GAIN, t95

LOOKS = (2, 4, 8, 16, 24)
TRIALS = 40000


def false_confirmations(spread: float, trials: int = TRIALS, seed: int = 1) -> float:
    """The share of ``trials`` identical-candidate measurements that confirm."""
    rng = random.Random(seed)
    hits = 0
    for _ in range(trials):
        xs: list[float] = []
        for n in LOOKS:
            xs += [rng.gauss(0.0, spread) for _ in range(n - len(xs))]
            mean = sum(xs) / n
            sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
            if mean - t95(n - 1) * sd / math.sqrt(n) > FLOOR_GAIN:
                hits += 1
                break
    return hits / trials


def main() -> None:
    for spread in (0.005, 0.01, 0.03, 0.07):
        rate = false_confirmations(spread)
        print(f"spread {100 * spread:.1f}% a pair: {100 * rate:.2f}% of {TRIALS} confirm")


if __name__ == "__main__":
    main()
