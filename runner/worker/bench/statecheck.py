"""Caches judged by behaviour, not by spelling (worker side).

``state_fingerprint(package)`` reads the state the measured package keeps between
calls: module globals, class attributes, instances held by them, closure cells and
``functools`` caches, down a few levels; ``tensor_attributes`` what is held on tensor
objects themselves (codes cached on the activation).  Containers are read by identity,
length and the identities of their newest items (an LRU at its cap still changes),
tensors by identity, version and address, ``functools`` caches by their hit/miss/size
counters (a read counts: the probe; the simulation's steps leave hits out,
``without_reads``), plain values by value.

``stateful_probe`` runs one real-training step between two fingerprints: when the
step changed the package's kept state, the op keeps state on its hot path, whatever
it is called, and the 8-step training simulation (``runner.worker.cachesim``) runs with
training-like inputs (fresh activations, a weight updated every step) and with the
benchmark idiom (the same tensors every step), and once more with fresh activations
and the weight held still.  Each simulated step records whether it wrote the kept
state; a step served without writing it is a hit.  Problems FAIL the shape: a stale
result with training-like inputs (a weight cache not invalidated on an update), and
state written at every step when only the activations change (a memo of activations
or outputs, whatever its key: it cannot hit in training).
"""

from __future__ import annotations

import functools
import gc
import random
import sys
import types
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, TypeGuard, TypeVar, cast

from runner.core.samples import Simulation as SimulationRecord
from runner.core.samples import SimulationRun, StateProbe
from runner.worker.cachesim import CacheProbe, SimResult, simulate_training_steps

if TYPE_CHECKING:
    import torch

    from runner.core.shapes import Shape
    from runner.core.spec import RoundSpec
    from runner.worker.ops.base import OpAdapter, Simulation

DEPTH = 3
NEWEST = 16  # items of a container whose identities enter its token
STEPS = 8
# The simulation's tensors are drawn from a seed the measured code cannot know or have
# seen before (a memo filled by an earlier run in the same process would hit otherwise).
_SECRET = random.SystemRandom()
# (name, fresh activations, weight step): training; fresh activations with the weight
# held still (a weight cache hits, an activation memo writes every step); the idiom.
MODES = (("fresh", True, 1e-2), ("activations", True, 0.0), ("idiom", False, 0.0))

Token = tuple[object, ...]
# What ``stateful_probe`` found (JSON: samples.json's ``state``).
StateRecord = StateProbe
_R = TypeVar("_R")


def state_fingerprint(package: str) -> dict[str, Token]:
    """``path -> token`` of everything the package ``package`` keeps between calls in
    its modules (what it keeps on tensor objects: ``tensor_attributes``)."""
    out: dict[str, Token] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not (name == package or name.startswith(package + ".")):
            continue
        for attr, value in list(vars(mod).items()):
            if not attr.startswith("__"):
                _walk(f"{name}.{attr}", value, out, DEPTH, package)
    return out


def tensor_attributes(tensors: Iterable[object] | None = None) -> dict[str, Token]:
    """``<tensor ID>.ATTR -> token`` of every Python attribute held on a tensor object
    (e.g. an activation's FP8 codes kept on the activation between calls): state the
    package's modules do not show.  ``tensors``: those (the simulation's inputs), else
    every live tensor (a scan of the garbage collector's objects, some 50 ms).  The
    harness sets none; a tensor that goes away takes its attributes with it."""
    if tensors is None:
        torch = sys.modules.get("torch")
        if torch is None:
            return {}
        kind = torch.Tensor
        tensors = (o for o in gc.get_objects() if issubclass(type(o), kind))
    out: dict[str, Token] = {}
    for obj in tensors:
        fields = getattr(obj, "__dict__", None)
        for attr, value in list(fields.items()) if fields else ():
            _walk(f"<tensor {id(obj)}>.{attr}", value, out, 1, "")
    return out


def _own(obj: object, package: str) -> bool:
    """Defined in ``package`` (its classes are walked; others' are not ours to read)."""
    module = getattr(obj, "__module__", "") or ""
    return module == package or module.startswith(package + ".")


def _is_tensor(value: object) -> TypeGuard[torch.Tensor]:
    """An instance of ``torch.Tensor`` (a subclass's instance too), never a class: an FP8
    library's tensor-subclass *class* has ``data_ptr`` and ``_version`` as attributes, and
    calling its unbound ``data_ptr()`` raises (docs/reliability.md §8: a false FAIL)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def _items(value: object) -> list[object]:
    try:
        if isinstance(value, Mapping):
            return [x for kv in list(value.items())[-NEWEST:] for x in kv]
        return list(cast("Iterable[object]", value))[-NEWEST:]
    except Exception:  # a container that cannot be listed: its identity and size only
        return []


LRU = "lru"  # a functools cache's token: (LRU, hits, misses, maxsize, currsize)


def lru_token(info: tuple[int | None, ...]) -> Token:
    """A ``functools`` cache's token from its ``cache_info()`` (hits first)."""
    return (LRU, *info)


def _without_hits(token: Token) -> Token:
    """``token`` without a ``functools`` cache's hit count (``lru_token``'s second
    field); any other token as it is."""
    if token and token[0] == LRU:
        return (LRU, *token[2:])
    return token


def _walk(path: str, value: object, out: dict[str, Token], depth: int, package: str) -> None:
    if depth < 0 or isinstance(value, types.ModuleType):
        return
    kind = type(value).__name__
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        out[path] = (kind, value if not isinstance(value, (str, bytes)) else hash(value))
        return
    if _is_tensor(value):
        out[path] = ("tensor", id(value), value._version, value.data_ptr())
        return
    info = getattr(value, "cache_info", None)
    if callable(info) and isinstance(value, functools._lru_cache_wrapper):
        out[path] = lru_token(info())
        return
    if isinstance(value, type):
        if _own(value, package):
            for attr, sub in list(vars(value).items()):
                if not attr.startswith("__") and not callable(sub):
                    _walk(f"{path}.{attr}", sub, out, depth - 1, package)
        return
    if isinstance(value, (types.FunctionType, types.MethodType)):
        func = getattr(value, "__func__", value)
        for i, cell in enumerate(func.__closure__ or ()):
            try:
                content = cell.cell_contents
            except ValueError:  # an empty cell
                continue
            _walk(f"{path}.<closure {i}>", content, out, depth - 1, package)
        return
    if isinstance(value, (Mapping, list, tuple, set, frozenset)) or hasattr(value, "maxlen"):
        items = _items(value)
        size = len(value) if hasattr(value, "__len__") else -1
        out[path] = (kind, id(value), size, tuple(id(x) for x in items))
        if isinstance(value, Mapping):
            for i, sub in enumerate(list(value.values())[-NEWEST:]):
                _walk(f"{path}[#{i}]", sub, out, depth - 1, package)
        return
    out[path] = (kind, id(value))
    fields = getattr(value, "__dict__", None)
    if isinstance(fields, dict):  # an instance of any class (a third-party LRU too)
        for attr, sub in list(fields.items()):
            _walk(f"{path}.{attr}", sub, out, depth - 1, package)


def changed_paths(before: Mapping[str, Token], after: Mapping[str, Token]) -> list[str]:
    return sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))


def stateful_probe(
    adapter: OpAdapter, shape: Shape, device: str, spec: RoundSpec, step: Callable[[], object]
) -> StateRecord:
    """Does one real-training step write state the package keeps between calls?  If
    so, run the 8-step simulation (fresh and benchmark idiom) where the op allows."""
    ops = getattr(adapter.api, "ops", adapter.api)
    package = str(getattr(ops, "__name__", "")).split(".")[0]
    if not package:
        return {"stateful": False, "written": []}

    def fingerprint() -> dict[str, Token]:
        return {**state_fingerprint(package), **tensor_attributes()}

    step()  # the first call may build handles, compile, pick a backend
    before = fingerprint()
    step()
    written = changed_paths(before, fingerprint())
    result: StateRecord = {"stateful": bool(written), "written": written[:8]}
    make = getattr(adapter, "simulation", None)
    sim: Simulation | None = make(shape, device) if written and make is not None else None
    if sim is None:
        return result
    op, dims, judge = sim
    watched, sim_state = _watching(op, package)
    runs: dict[str, SimResult] = {}
    for index, (mode, fresh, lr) in enumerate(MODES):
        # each mode draws its own tensors: a memo filled by one mode must not serve another
        runs[mode] = simulate_training_steps(
            watched,
            **dims,
            steps=STEPS,
            device=device,
            probe=CacheProbe(),
            fresh=fresh,
            judge=judge,
            state=sim_state,
            seed=_SECRET.getrandbits(62) + index,
            lr=lr,
        )
    simulation: SimulationRecord = {
        "fresh": _run_record(runs["fresh"]),
        "activations": _run_record(runs["activations"]),
        "idiom": _run_record(runs["idiom"]),
        "problems": simulation_problems(runs),
    }
    result["simulation"] = simulation
    return result


def _run_record(run: SimResult) -> SimulationRun:
    """One mode's run for ``samples.json``, with the kept-state counts."""
    return {
        **run.to_dict(),
        "state_written_steps": run.state_counts()[0],
        "served_steps": run.state_counts()[1],
        "mismatched_steps": list(run.mismatched_steps),
    }


def _watching(
    op: Callable[..., _R], package: str
) -> tuple[Callable[..., _R], Callable[[], dict[str, Token]]]:
    """``op`` as the simulation calls it, noting (weakly) every tensor it was given,
    and the simulation's state fingerprint: the package's modules and the attributes
    held on those tensors (cheaper than a scan of every live tensor at every step)."""
    seen: list[weakref.ref[torch.Tensor]] = []

    def watched(*args: object, **kwargs: object) -> _R:
        seen[:] = [r for r in seen if r() is not None]
        seen.extend(weakref.ref(t) for t in (*args, *kwargs.values()) if _is_tensor(t))
        return op(*args, **kwargs)

    def state() -> dict[str, Token]:
        live = [t for t in (r() for r in seen) if t is not None]
        return without_reads({**state_fingerprint(package), **tensor_attributes(live)})

    return watched, state


def without_reads(tokens: Mapping[str, Token]) -> dict[str, Token]:
    """``tokens`` with each ``functools`` cache's hit counter left out: a step that only
    reads a cache (a hit) wrote nothing.  The simulation asks which steps wrote kept
    state; a cached helper hit at every call (upstream's device-capability query,
    ``primus_turbo.pytorch.core.utils._get_device_compute_capability`` at a6a16cdc) is
    served, not written.  A memo of activations still misses, so still writes, every
    step.  The probe before the simulation keeps the hits: a weight cache that hits on
    a training step's in-place update is what makes the simulation run."""
    return {k: _without_hits(v) for k, v in tokens.items()}


def simulation_problems(runs: Mapping[str, SimResult]) -> list[str]:
    """What the simulation rejects: a stale result with training-like inputs (a cache
    not invalidated when the weight changes), and kept state written at every step
    while only the activations change (the weight held still): state that depends on
    each call's activations, i.e. a memo of activations or outputs, however keyed."""
    problems = list(runs["fresh"].problems())
    acts = runs.get("activations")
    if acts is not None:
        late = [s.step for s in acts.steps[1:] if s.state_written]
        if late:
            problems.append(
                f"kept state written at step(s) {late} of {len(acts.steps)} with the weight held "
                "still and only the activations fresh: state that depends on each call's "
                "activations (a memo of activations or outputs), a cache that cannot hit in "
                "training"
            )
        problems += [f"(weight held still) {p}" for p in acts.problems()]
    return problems
