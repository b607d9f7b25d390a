"""How long one comparison may measure before its verdict is final (docs/measurement.md
§4.2).  They are gate constants (``runner.judge.gate_constants`` ledgers them), so they
live in the judge layer beside the gate; ``runner.flow.measure`` applies them."""

from __future__ import annotations

# Seconds by validation level: past them the verdict is final.  A host or a test suite
# may lower them (``runner.flow.measure.ROUND_CAP_ENV``).
ROUND_CAP_S = {"quick": 150.0, "full": 600.0}
MAX_PAIRS = 96  # fresh process pairs of one comparison, at most
