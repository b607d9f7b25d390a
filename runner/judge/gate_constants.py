"""The gate's own constants, collected in one place (docs/reliability.md §7, row 17).

Every module-level numeric constant of the modules that decide a verdict or how long a
comparison measures before it is final (``GATE_MODULES``: the gate, the near-noise
rule, the held-out rule of final acceptance, the vetoes, the measuring caps), imported
names aside, and the threshold and pair rules at a grid of sigma_G (their literals:
3 sigma_G, 3 pairs).  ``digest`` is a sha256 over them, the same text
``docs/gate-constants.jsonl`` hashes: a campaign's digest names the repository ledger's
entry that judged it.

Two readers: the repository's test (``tests/test_gate_ledger.py``), which fails until a
changed constant has its line in ``docs/gate-constants.jsonl``, and a campaign's
gate-field ledger (``runner.store.gate_ledger``), which records them at the baseline and
refuses a round whose running code judges with other constants.  Collected afresh on
every call (a few small source files): nothing caches what the running code holds.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from types import ModuleType

from runner.judge import evidence, gate, gate_inputs, heldout, measuring_caps, vetoes

GATE_MODULES: tuple[ModuleType, ...] = (
    gate,
    evidence,
    gate_inputs,
    heldout,
    vetoes,
    measuring_caps,
)
SIGMA_GRID = (0.0, 0.005, 0.01, 0.011, 0.02, 0.05)


def _numeric(value: object) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    if isinstance(value, dict):
        return bool(value) and all(_numeric(v) for v in value.values())
    if isinstance(value, tuple | list):
        return bool(value) and all(_numeric(v) for v in value)
    return False


def _defined(module: ModuleType) -> dict[str, object]:
    """``module.NAME`` -> value of each numeric constant the module itself assigns."""
    source = Path(str(module.__file__)).read_text(encoding="utf-8")
    found: dict[str, object] = {}
    for key, value in vars(module).items():
        if key.isupper() and _numeric(value) and re.search(rf"(?m)^{key}\s*(:[^=]*)?=", source):
            found[f"{module.__name__}.{key}"] = json.loads(json.dumps(value))
    return found


def gate_constants() -> dict[str, object]:
    """Every gate constant by its dotted name, and the two sigma_G rules on the grid."""
    found: dict[str, object] = {}
    for module in GATE_MODULES:
        found.update(_defined(module))
    found["accept_threshold(sigma_g)"] = {str(s): gate.accept_threshold(s) for s in SIGMA_GRID}
    found["required_pairs(sigma_g)"] = {str(s): gate.required_pairs(s) for s in SIGMA_GRID}
    return found


def digest(constants: dict[str, object]) -> str:
    """sha256 over the constants as docs/gate-constants.jsonl hashes them."""
    text = json.dumps(constants, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def current_digest() -> str:
    """The digest of the running code's gate constants."""
    return digest(gate_constants())


def changed_names(recorded: dict[str, object], now: dict[str, object]) -> list[str]:
    """The constants added, removed or changed between two collections, sorted."""
    return sorted(k for k in recorded.keys() | now.keys() if recorded.get(k) != now.get(k))
