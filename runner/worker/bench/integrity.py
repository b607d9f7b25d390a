"""Integrity of what a timing loop measures: the outputs of timed calls are checked,
and the harness's own clocks and timing functions are the ones it started with.

Self-contained and loop-agnostic, so that any timing loop can use it:

* ``OutputSampler(fn)`` wraps a timed callable.  Every call goes through the same
  wrapper and returns what ``fn`` returned; AFTER each call returns, a secret random
  generator (seeded from the OS, never from the spec) decides whether that call's
  output is kept (reservoir sampling: ``keep`` calls uniformly chosen among all the
  calls made, warm-up included).  Keeping is holding a reference: no copy, no device
  synchronisation inside a timed region.  Checked and unchecked calls are therefore the
  same calls: the code under test cannot tell which of its outputs will be judged.
  ``finish`` (the worker passes ``runner.worker.ops.base.finished``) runs on every output
  inside the timed call: an output that is not a plain ``torch.Tensor`` raises there.
  ``problems(verify, kind)`` judges the kept outputs afterwards (with a CUDA graph
  replay the kept tensors are the graph's outputs, holding the last replay's values).
* ``BindingGuard`` records the objects bound to the harness's clocks and timing
  functions (``runner.worker.bench.timing.process_time``, ``time.perf_counter``,
  ``runner.worker.bench.timing.measure``...) before the code under test is imported, and
  ``changed()`` names every binding that now points elsewhere.  The worker verifies
  after the import and after every shape: a replaced binding FAILs the shape, named.
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, cast

from runner.worker.bench.timing import CLOCK_NAMES

if TYPE_CHECKING:
    import torch

    from runner.worker.ops.base import InputFlip, Outputs, Verify

KEEP = 3  # timed outputs judged per timed callable

# (module, attribute) pairs the timing loops read: clocks and the loops themselves.
GUARDED: tuple[tuple[str, str], ...] = (
    *(("time", name) for name in CLOCK_NAMES),
    ("runner.worker.bench.timing", "perf_counter"),
    ("runner.worker.bench.timing", "process_time"),
    ("runner.worker.bench.timing", "measure"),
    ("runner.worker.bench.timing", "measure_cpu"),
    ("runner.worker.bench.timing", "_warm_up"),
    ("runner.worker.bench.timing", "check_clocks"),
    ("runner.worker.bench.timing", "Timing"),
    ("runner.worker.bench.gpu", "measure_gpu"),
    ("runner.worker.bench.gpu", "_measure_hot"),
    ("runner.worker.bench.gpu", "_measure_cold"),
    ("runner.worker.bench.gpu", "_Region"),
    ("runner.worker.bench.integrity", "OutputSampler"),
    ("runner.worker.bench.integrity", "BindingGuard"),
    ("runner.worker.bench.worker_pass", "measure_shape"),
    ("runner.worker.bench.worker_pass", "time_case"),
    ("runner.worker.bench.worker_pass", "fresh_timing"),
)


class OutputSampler:
    """A timed callable that keeps a uniform random sample of its outputs."""

    def __init__(
        self,
        fn: Callable[[], Outputs],
        keep: int = KEEP,
        finish: Callable[[Outputs], object] | None = None,
        flip: InputFlip | None = None,
        slot: object | None = None,
    ) -> None:
        self._fn = fn
        self._slot = slot  # runner.worker.bench.gpu.CaptureSlot shared with the pool, or None
        self._finish = finish  # inside the timed call: raises on an unfinished output
        self._flip = flip  # runner.worker.ops.base.InputFlip of this closure, or None
        self._keep = keep
        self._rng = random.Random(random.SystemRandom().getrandbits(64))
        self.calls = 0
        self.kept: list[tuple[int, Outputs]] = []
        self._last: Outputs | None = None
        self._flipped = False

    @property
    def replay_probe(self) -> _Probe | None:
        """What the GPU engine's replay check negates and reads
        (``runner.worker.bench.replay_check``); None when the op names no input to negate."""
        return None if self._flip is None else _Probe(self)

    @property
    def capture_key(self) -> object:
        """What the GPU engine remembers a failed graph capture by
        (``runner.worker.bench.gpu.capture_key``), the same in every block: the slot
        the sampler was given (one per shape and kind in a serving worker), else the
        wrapped callable."""
        return self._fn if self._slot is None else self._slot

    def __call__(self) -> Outputs:
        out = self._fn()
        if self._finish is not None:
            self._finish(out)
        self._last = out
        if self._flipped:  # the replay check's call on a negated input: never judged
            return out
        self.calls += 1
        # Algorithm R, decided after the call returned.
        if len(self.kept) < self._keep:
            self.kept.append((self.calls, out))
        else:
            slot = self._rng.randrange(self.calls)
            if slot < self._keep:
                self.kept[slot] = (self.calls, out)
        return out

    def problems(self, verify: Verify | None, kind: str) -> list[str]:
        """One line per kept output that ``verify`` rejects, naming the call (the kept
        outputs are judged in one call: a reference is made once for all of them)."""
        found: list[str] = []
        if verify is None:
            return found
        kept = sorted(self.kept, key=lambda x: x[0])
        verdicts = verify(kind, [out for _, out in kept]) if kept else []
        for (index, _), problems in zip(kept, verdicts, strict=True):
            for problem in problems:
                found.append(
                    f"timed {kind} call #{index} of {self.calls} (sampled after the fact) "
                    f"differs from the reference: {problem}"
                )
        self.kept.clear()
        return found


class _Probe:
    """An ``OutputSampler``'s flip and the named outputs of its last call (under a graph
    capture: the tensors every replay writes)."""

    def __init__(self, sampler: OutputSampler) -> None:
        self._sampler = sampler
        # made by ``replay_probe`` only for a sampler with a flip
        self._flip = cast("InputFlip", sampler._flip)

    def flip(self) -> None:
        self._flip()
        self._sampler._flipped = not self._sampler._flipped

    def outputs(self) -> list[torch.Tensor]:
        last = self._sampler._last  # a finished output: its items are tensors
        items = cast("Sequence[torch.Tensor]", last if isinstance(last, (tuple, list)) else (last,))
        return [items[i] for i in self._flip.negates]


class HarnessTampered(RuntimeError):
    """The code under test replaced a clock or a timing function of the harness."""


class BindingGuard:
    """The objects bound to ``GUARDED`` names when the guard was made."""

    def __init__(self, names: Iterable[tuple[str, str]] = GUARDED) -> None:
        """Every name must resolve: one the harness no longer has (a function moved or
        renamed) would otherwise go unguarded without a word.  The harness's own
        modules are imported here, before the code under test is."""
        self._seen: dict[tuple[str, str], object] = {}
        for module, attr in names:
            mod = importlib.import_module(module)
            if not hasattr(mod, attr):
                raise LookupError(
                    f"the binding guard names {module}.{attr}, which the harness does "
                    "not have: update GUARDED in runner/worker/bench/integrity.py"
                )
            self._seen[(module, attr)] = getattr(mod, attr)
        self._modules = {m: sys.modules.get(m) for m, _ in self._seen}

    def changed(self) -> list[str]:
        """``module.attr`` of every binding that no longer holds its first object."""
        out = []
        for (module, attr), obj in self._seen.items():
            mod = self._modules[module]
            if mod is None or sys.modules.get(module) is not mod:
                out.append(f"sys.modules[{module!r}]")
            elif getattr(mod, attr, None) is not obj:
                out.append(f"{module}.{attr}")
        return sorted(set(out))

    def verify(self) -> None:
        """Raise ``HarnessTampered`` naming every replaced binding."""
        changed = self.changed()
        if changed:
            raise HarnessTampered(
                "harness tampering: the measured code replaced "
                + ", ".join(changed)
                + " (a clock or timing function of the harness): refusing its timings"
            )
