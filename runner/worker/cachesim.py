"""The 8-step cache hit-rate simulation of docs/protocol.md §8.4 (worker side, torch).

A round that adds any cache must show, over ``steps`` training-like steps with a FRESH
activation ``a`` (M, K) and a FRESH ``grad_out`` (M, N) each step and one weight ``w``
(N, K) updated in place by an optimiser-like step: weight-cache hits >= 1 per step and
activation/grad_out hits == 0.

Counting hits: the op under test keeps its own caches; the caller tells a
``CacheProbe`` how to read their *cumulative* hit counts, in one of two ways::

    probe = CacheProbe()
    mod._W_CACHE = probe.watch(mod._W_CACHE, kind="weight")   # a counting dict, installed
    probe.add_counter("activation", lambda: mod.ACT_STATS.hits)  # or any counter reader

``watch`` returns a ``CountingDict`` (a ``dict`` subclass) holding the cache's items; the
caller must put it where the op looks the cache up.  A hit is a successful ``d[k]``,
``d.get(k)`` (key present), ``d.setdefault(k, ...)`` (key present) or ``d.pop(k)``;
``k in d`` is not counted, so ``if k in d: return d[k]`` counts once; but reading back
what was just stored (``d[k] = v; return d[k]``) counts a hit: keep ``v`` instead.

Identity reuse: CPython reuses the address (hence the ``id()``) of a freed object for
the next object of the same type, so an ``id()``-keyed cache can HIT on a brand-new
tensor and return a stale result.  The simulation therefore keeps every fresh tensor of
the run alive until the end: an activation-cache hit it reports is a real re-use of an
identity, never an artefact of address reuse (and never hidden by it).

The weight update is ``w.add_(...)`` under ``torch.no_grad()``, as ``torch.optim`` does:
it advances ``w._version``.  (``w.data.add_(...)`` would NOT: ``.data`` is a tensor with
its own version counter, so a cache keyed on ``w._version`` would go stale unnoticed.)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast, overload

import torch

from runner.core.samples import SimulationRun
from runner.worker.ops.base import seeded

KINDS = ("weight", "activation")
_K = TypeVar("_K")
_V = TypeVar("_V")
_T = TypeVar("_T")
_MISSING = object()


class CountingDict(dict[_K, _V]):
    """A dict that counts lookups that find their key (``hits``) and that miss."""

    hits: int
    misses: int

    def __init__(self, items: Mapping[_K, _V] | Iterable[tuple[_K, _V]] = ()) -> None:
        super().__init__(items)
        self.hits = 0
        self.misses = 0

    def _count(self, found: bool) -> None:
        if found:
            self.hits += 1
        else:
            self.misses += 1

    def __getitem__(self, key: _K) -> _V:
        self._count(dict.__contains__(self, key))
        return super().__getitem__(key)

    @overload
    def get(self, key: _K, default: None = None, /) -> _V | None: ...
    @overload
    def get(self, key: _K, default: _V, /) -> _V: ...
    @overload
    def get(self, key: _K, default: _T, /) -> _V | _T: ...
    def get(self, key: _K, default: object = None) -> object:
        self._count(dict.__contains__(self, key))
        return super().get(key, default)

    @overload
    def setdefault(
        self: CountingDict[_K, _T | None], key: _K, default: None = None, /
    ) -> _T | None: ...
    @overload
    def setdefault(self, key: _K, default: _V, /) -> _V: ...
    def setdefault(self, key: _K, default: object = None) -> object:
        self._count(dict.__contains__(self, key))
        return super().setdefault(key, cast("_V", default))

    @overload
    def pop(self, key: _K, /) -> _V: ...
    @overload
    def pop(self, key: _K, default: _V, /) -> _V: ...
    @overload
    def pop(self, key: _K, default: _T, /) -> _V | _T: ...
    def pop(self, key: _K, default: object = _MISSING) -> object:
        self._count(dict.__contains__(self, key))
        return super().pop(key) if default is _MISSING else super().pop(key, default)


class CacheProbe:
    """Reads cumulative cache-hit counters, per kind ("weight" | "activation").  A probe
    with no weight counter means "no weight cache": the >= 1 hit/step rule is skipped."""

    def __init__(self) -> None:
        self._readers: dict[str, list[Callable[[], int]]] = {k: [] for k in KINDS}

    def add_counter(self, kind: str, read: Callable[[], int]) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        self._readers[kind].append(read)

    def watch(self, cache: Mapping[_K, _V] | None = None, *, kind: str) -> CountingDict[_K, _V]:
        """A counting copy of ``cache`` (install it where the op reads the cache)."""
        counting: CountingDict[_K, _V] = CountingDict(cache or {})
        self.add_counter(kind, lambda: counting.hits)
        return counting

    @property
    def has_weight_cache(self) -> bool:
        return bool(self._readers["weight"])

    def read(self) -> tuple[int, int]:
        """(weight hits, activation hits) so far, summed over the registered counters."""
        return (
            sum(r() for r in self._readers["weight"]),
            sum(r() for r in self._readers["activation"]),
        )


@dataclass(frozen=True)
class StepHits:
    step: int
    weight_version: int  # w._version during this step's forward and backward
    fwd_weight_hits: int
    bwd_weight_hits: int
    fwd_activation_hits: int
    bwd_activation_hits: int
    max_abs_err: float | None = None  # vs ``reference`` when given
    state_written: bool | None = None  # the op's kept state changed during the step

    @property
    def weight_hits(self) -> int:
        return self.fwd_weight_hits + self.bwd_weight_hits

    @property
    def activation_hits(self) -> int:
        return self.fwd_activation_hits + self.bwd_activation_hits


@dataclass
class SimResult:
    steps: list[StepHits]
    has_weight_cache: bool
    fresh: bool = True  # False: the benchmark idiom (same tensors, no update)
    atol: float = 0.0
    mismatched_steps: list[int] = field(default_factory=list)

    @property
    def per_step(self) -> list[tuple[int, int]]:
        return [(s.weight_hits, s.activation_hits) for s in self.steps]

    def problems(self) -> list[str]:
        out = []
        if self.has_weight_cache:
            cold = [s.step for s in self.steps if s.weight_hits < 1]
            if cold:
                out.append(f"weight cache missed every lookup at step(s) {cold}")
        hot = [s.step for s in self.steps if s.activation_hits > 0]
        if hot:
            out.append(f"activation/grad_out cache hit at step(s) {hot}")
        if self.mismatched_steps:
            out.append(f"result differs from the reference at step(s) {self.mismatched_steps}")
        return out

    @property
    def passes(self) -> bool:
        return not self.problems()

    def state_counts(self) -> tuple[int, int]:
        """(steps that wrote the op's kept state, steps served without writing it);
        (0, 0) when the run did not watch the state."""
        seen = [s.state_written for s in self.steps if s.state_written is not None]
        return sum(seen), len(seen) - sum(seen)

    def trace_markdown(self, first: int = 4) -> str:
        """The hit-rate trace for the round summary's transfer check."""
        head = "| step | w._version | weight hits (fwd/bwd) | activation hits (fwd/bwd) |"
        rows = [head, "|---|---|---|---|"]
        for s in self.steps[:first]:
            rows.append(
                f"| {s.step} | {s.weight_version} | {s.fwd_weight_hits}/{s.bwd_weight_hits} "
                f"| {s.fwd_activation_hits}/{s.bwd_activation_hits} |"
            )
        verdict = "PASS" if self.passes else "FAIL: " + "; ".join(self.problems())
        mode = "fresh tensors" if self.fresh else "benchmark idiom"
        return "\n".join([*rows, "", f"{mode}, {len(self.steps)} steps: {verdict}"])

    def to_dict(self) -> SimulationRun:
        return {
            "steps": [dataclasses.asdict(s) for s in self.steps],
            "has_weight_cache": self.has_weight_cache,
            "fresh": self.fresh,
            "passes": self.passes,
            "problems": self.problems(),
        }


Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def _delta(probe: CacheProbe, before: tuple[int, int]) -> tuple[int, int]:
    now = probe.read()
    return now[0] - before[0], now[1] - before[1]


def simulate_training_steps(
    op: Op,
    *,
    m: int,
    n: int,
    k: int,
    steps: int = 8,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.bfloat16,
    probe: CacheProbe,
    fresh: bool = True,
    reference: Op | None = None,
    atol: float = 5e-2,
    lr: float = 1e-2,
    seed: int = 0,
    judge: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], bool] | None = None,
    state: Callable[[], object] | None = None,
) -> SimResult:
    """Run ``steps`` training-like steps of ``out = op(a, w); out.backward(grad_out)``.

    ``fresh=True`` (the protocol): a new ``a`` and ``grad_out`` every step, ``w`` updated
    in place after each backward.  ``fresh=False``: the benchmark idiom, same ``a``,
    ``grad_out`` and ``w`` every step, to show how much a cache inflates a benchmark.
    ``reference(a, w)``, when given, is compared with each step's output (``atol``);
    ``judge(out, a, w)``, when given, says whether a step's output is right (an op's
    own tolerance, e.g. an SNR floor for FP8).  ``state()``, when given, fingerprints
    the state the op keeps between calls: each step records whether it changed."""
    gen = seeded(str(device), seed)  # drawn in place

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, device=device).to(dtype)

    w = torch.nn.Parameter(randn(n, k))
    keep_alive: list[torch.Tensor] = []  # no id() reuse across steps (module docstring)
    a0, g0 = randn(m, k).requires_grad_(), randn(m, n)
    result = SimResult([], probe.has_weight_cache, fresh, atol)
    for step in range(steps):
        a, grad_out = (randn(m, k).requires_grad_(), randn(m, n)) if fresh else (a0, g0)
        version = w._version
        state_before = state() if state is not None else None
        before = probe.read()
        out = op(a, w)
        fwd = _delta(probe, before)
        before = probe.read()
        out.backward(grad_out)
        bwd = _delta(probe, before)
        err = None
        if reference is not None:
            with torch.no_grad():
                err = (out.float() - reference(a, w).float()).abs().max().item()
            if err > atol:
                result.mismatched_steps.append(step)
        wrong = judge is not None and not judge(out.detach(), a.detach(), w.detach())
        if wrong and step not in result.mismatched_steps:
            result.mismatched_steps.append(step)
        written = None if state is None else state() != state_before
        keep_alive += [a, grad_out, out]
        result.steps.append(StepHits(step, version, fwd[0], bwd[0], fwd[1], bwd[1], err, written))
        _optimiser_step(w, lr if fresh else 0.0)
    return result


def _optimiser_step(w: torch.nn.Parameter, lr: float) -> None:
    """SGD-like in-place update (bumps ``w._version``, as torch.optim does); lr=0: none."""
    if w.grad is None:
        raise ValueError("the op produced no gradient for the weight: backward is not wired")
    if lr:
        with torch.no_grad():
            w.add_(w.grad, alpha=-lr)
    w.grad = None
