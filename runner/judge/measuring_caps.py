"""How long one comparison may measure before its verdict is final (docs/measurement.md
§4.2).  They are gate constants (``runner.judge.gate_constants`` ledgers them), so they
live in the judge layer beside the gate; ``runner.compare.loop`` applies them."""

from __future__ import annotations

# Seconds by validation level: past them the verdict is final.  A host or a test suite
# may lower them (``runner.compare.loop.ROUND_CAP_ENV``).
ROUND_CAP_S = {"quick": 150.0, "full": 600.0}
MAX_PAIRS = 96  # fresh process pairs of one comparison, at most
# Pairs a comparison may always measure, however long they take (unless a host or a
# test suite set the seconds): 3 re-measurements of 4 pairs, what the near-noise rule
# needs for a gain 1.5 times the per-pair spread.  On a loaded 2-core CPU a pair takes
# about 25 s, so 150 s held 6 and rolled back a clear +10.9% gain as too volatile
# (docs/data/history_demo_cpu.md, the demo's run 2 at d6c008f, 2026-12-02); on the H200 150 s holds
# about 14 pairs, so the seconds bind there first.  A noisy machine makes a round
# longer, not wrong.
CAP_PAIRS = 12
# Pairs a comparison may always measure while its paired gain's whole 95% interval lies
# above the near-noise rule's 1% (a gain the rule has not settled yet: at 8.5% a pair it
# wants 3 re-measurements of 8); an identical candidate seldom gets there, so the extra
# time goes to the promising ones only.  The near-noise rule still decides.
PROMISING_PAIRS = 24
