"""Worker-side op adapter base: builds seeded inputs, runs the target's forward and
backward, computes the float32 reference and the correctness figures.

An adapter turns (target API, shape, options) into a ``Case``: closures that the
timing engine calls and a ``check`` that the worker calls on fresh inputs.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, cast

import torch

from runner.core.op_info import op_info

if TYPE_CHECKING:
    from runner.core.shapes import Shape
    from runner.targets.base import TargetAPI

# What a timed closure returns: one tensor, or a tuple or list of them.
Outputs = torch.Tensor | tuple[torch.Tensor, ...] | list[torch.Tensor]
# A ``Case.verify``: (kind, the sampled outputs of that closure) -> problems of each.
Verify = Callable[[str, list[Outputs]], list[list[str]]]
# The op's options from the round spec: JSON values (granularity, format, block size,
# backend; None where the campaign names none).
Options = dict[str, Any]
_T = TypeVar("_T")


class SimDims(TypedDict):
    """The dimensions of the 8-step simulation's ``op(a, w)`` (``runner.worker.cachesim``)."""

    m: int
    n: int
    k: int


# (op(a, w), its dimensions, judge(out, a, w)): what ``runner.worker.bench.statecheck`` needs
# for the 8-step simulation (an adapter's ``simulation``).
Simulation = tuple[
    Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    SimDims,
    Callable[[torch.Tensor, torch.Tensor, torch.Tensor], bool],
]


@dataclass
class CheckResult:
    """Correctness of one call on one input set."""

    ok: bool
    figures: dict[str, float]  # e.g. out_snr, da_snr, db_snr (dB)
    problems: list[str] = field(default_factory=list)


@dataclass
class Case:
    """Timed closures over one fixed input set (the benchmark idiom)."""

    forward: Callable[[], Outputs]
    backward: Callable[[], Outputs] | None
    fwd_flops: float
    bwd_flops: float
    fwd_bytes: float = 0.0
    bwd_bytes: float = 0.0
    # verify("forward" | "backward", [what that closure returned, ...]) -> problems of
    # each: the timed outputs sampled by runner.worker.bench.integrity are judged together
    # against the float32 reference of the case's inputs with ``check``'s thresholds.
    verify: Verify | None = None
    # "forward" / "backward": the input whose negation negates the named outputs of that
    # closure (the GPU engine's replay check, runner.worker.bench.replay_check)
    flips: dict[str, InputFlip] = field(default_factory=dict)


@dataclass(frozen=True)
class InputFlip:
    """Negates ``tensor`` in place (a second call restores it exactly), outside autograd's
    view; the closure's outputs at ``negates`` (indices into what it returns) negate with
    it."""

    tensor: torch.Tensor
    negates: tuple[int, ...] = (0,)

    def __call__(self) -> None:
        with torch.no_grad():
            self.tensor.data.neg_()


@dataclass
class FreshStep:
    """A real training step (``step``) and the part of it that only draws its fresh
    inputs (``draw``), timed apart so that its cost can be taken out of the step's."""

    step: Callable[[], Outputs]
    draw: Callable[[], list[torch.Tensor]]


Tensors = tuple[torch.Tensor, ...]
FRESH_LR = 1e-3  # SGD step on the weight, relative to the gradient's RMS
FRESH_KEEP = 64  # fresh tensors kept alive, so no id() or address repeats among them


class UnfinishedOutput(RuntimeError):
    """A timed or real-training call returned something other than plain tensors."""


def output_tensors(values: object) -> list[object]:
    """The tensors of what a call returned: itself, or the items of a tuple or list
    (``None`` items, unused gradients, left out)."""
    items = values if isinstance(values, (tuple, list)) else (values,)
    return [x for x in items if x is not None]


def finished(values: _T, where: str) -> _T:
    """The finished-output guard (docs/reliability.md §8): every output of a timed call or of
    the real-training step is exactly ``torch.Tensor`` with storage (not a subclass,
    which can defer its work to the first read, after the clock stopped, and not a
    meta tensor, which has no values).  A plain tensor holds its values when the call
    returns on the CPU; on a GPU the batch's end event waits for the stream's work.
    Raises ``UnfinishedOutput`` naming the class; returns ``values``."""
    for x in output_tensors(values):
        if type(x) is not torch.Tensor:
            kind = type(x)
            raise UnfinishedOutput(
                f"finished-output guard: the {where} returned a "
                f"{kind.__module__}.{kind.__qualname__}, not a plain torch.Tensor (a "
                "subclass can defer its work until it is read, after the clock stopped): "
                "return the computed torch.Tensor"
            )
        if x.is_meta:
            raise UnfinishedOutput(
                f"finished-output guard: the {where} returned a meta tensor (no values): "
                "return the computed torch.Tensor"
            )
    return values


def read_all(values: Sequence[torch.Tensor], where: str) -> torch.Tensor:
    """Every element of every tensor read (a float32 sum of each, no host sync): a result
    left lazy or skipped costs here what it saved in the timed loop."""
    checked = output_tensors(finished(tuple(values), where))
    tensors = [x for x in checked if isinstance(x, torch.Tensor)]  # all, once finished
    if not tensors:
        return torch.zeros(())
    return torch.stack([x.detach().sum(dtype=torch.float32) for x in tensors])


def seeded(device: str, seed: int) -> torch.Generator:
    """A generator on ``device`` seeded with ``seed``: inputs are drawn where they are
    used, so every process on one kind of device draws the same values for a seed.
    Drawing Llama-size inputs on the CPU cost about 1 s per 90M values and was most of
    a GPU worker's start-up (four pool members and two checks per shape)."""
    return torch.Generator(device=torch.device(device)).manual_seed(seed)


def fresh_training_step(
    device: str,
    seed: int,
    fresh: Sequence[tuple[tuple[int, ...], bool]],
    weights: Sequence[torch.Tensor],
    run: Callable[..., Sequence[torch.Tensor]],
) -> FreshStep:
    """Training as training runs it: every step draws NEW values for each tensor of
    ``fresh`` ((shape, requires_grad), bf16, on new buffers), calls ``run(*tensors)``
    (forward and backward; returns every output and gradient, the gradients of
    ``weights`` last, in order), reads every one of them (``read_all``: training uses
    the output and the activation gradient too) and then takes a small SGD step on each
    weight (``w.add_``, as ``torch.optim`` does: the values and ``w._version`` change).
    Nothing is reused from one step to the next, so a cache keyed on the identity or on
    the content of an activation misses."""
    # A seed the measured code cannot know: the values never repeat between two runs of
    # the step in one process (a memo filled by the first would hit in the second).
    secret = random.SystemRandom().getrandbits(62)
    gen = seeded(device, seed ^ secret)
    keep: list[torch.Tensor] = []

    def draw() -> list[torch.Tensor]:
        made = [
            torch.randn(shape, generator=gen, device=device, dtype=torch.bfloat16).requires_grad_(
                grad
            )
            for shape, grad in fresh
        ]
        keep.extend(made)
        if len(keep) > FRESH_KEEP:
            del keep[: len(made)]
        return made

    def step() -> Outputs:
        outs = tuple(run(*draw()))
        read_all(outs, "real-training step")
        grads = outs[len(outs) - len(weights) :]
        with torch.no_grad():
            for w, gw in zip(weights, grads, strict=True):
                rms = gw.float().pow(2).mean().sqrt().clamp_min(1e-12)
                w.add_((gw / rms).to(w.dtype), alpha=-FRESH_LR)
        return grads

    return FreshStep(step, draw)


Refs = dict[str, tuple[tuple[str, ...], tuple[torch.Tensor, ...]]]
# The one reference set alive in a worker (``snr_verifier``): {"owner": ..., "refs": ...}.
_REFS_SLOT: dict[str, object] = {}


def snr_verifier(
    make_refs: Callable[[], Refs],
    judge: Callable[[dict[str, float], Tensors, Tensors], list[str]],
) -> Verify:
    """A ``Case.verify``: ``make_refs()`` maps "forward"/"backward" to (names, reference
    tensors), built from inputs drawn again from the case's seed; what the closure
    returned is judged name by name with ``judge``.

    References are made when a sampled output is judged, not held by the case: one set
    is alive per process (consecutive checks of one case share it, the next case's
    replaces it), so a worker's device memory is its inputs and pool, not float32
    copies of every output of every pool member (about 1.8 GiB per member for the
    Llama-2-7B shapes, which bounded how many workers a wave could hold)."""
    owner = object()

    def refs() -> Refs:
        if _REFS_SLOT.get("owner") is not owner:
            _REFS_SLOT.clear()  # the last case's set goes before this one is made
            _REFS_SLOT["refs"] = make_refs()
            _REFS_SLOT["owner"] = owner
        made = cast(Refs, _REFS_SLOT["refs"])
        return made

    def verify(kind: str, gots: list[Outputs]) -> list[list[str]]:
        return [one(kind, got) for got in gots]

    def one(kind: str, got: Outputs) -> list[str]:
        if kind not in ("forward", "backward"):
            return []
        table = refs()
        if kind not in table:
            return []
        names, ref = table[kind]
        outs = (got,) if isinstance(got, torch.Tensor) else tuple(got)
        if len(outs) != len(ref):
            return [f"timed {kind} returned {len(outs)} tensor(s), expected {len(ref)}"]
        figures = {
            f"{n}_snr": snr_db(r, x) if x.shape == r.shape else float("-inf")
            for n, x, r in zip(names, outs, ref, strict=True)
        }
        return judge(figures, outs, ref)

    return verify


def snr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    """10*log10(|ref|^2 / |out-ref|^2) in float64; +inf when identical."""
    ref64, out64 = ref.detach().double(), out.detach().double()
    noise = (ref64 - out64).pow(2).sum().item()
    signal = ref64.pow(2).sum().item()
    if noise == 0.0:
        return float("inf")
    return 10.0 * torch.log10(torch.tensor(signal / noise)).item()


def input_problems(
    names: tuple[str, ...], inputs: tuple[torch.Tensor, ...], pristine: list[torch.Tensor]
) -> list[str]:
    """One problem per input the call wrote into (compared with its pristine copy)."""
    return [
        f"the call wrote into its input {n}"
        for n, t, p in zip(names, inputs, pristine, strict=True)
        if not torch.equal(t.detach(), p)
    ]


class OpAdapter:
    """Base class; subclasses set ``name`` and implement the hooks."""

    name = ""

    def __init__(self, api: TargetAPI, options: Options) -> None:
        self.api = api
        self.options = options
        self.info = op_info(self.name)

    def case(self, shape: Shape, device: str, seed: int) -> Case:
        raise NotImplementedError

    def check(self, shape: Shape, device: str, seed: int) -> CheckResult:
        raise NotImplementedError


def load_adapter(name: str, api: TargetAPI, options: Options) -> OpAdapter:
    """Instantiate the worker-side adapter registered for op ``name``."""
    module_name, cls_name = op_info(name).adapter.split(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    adapter: OpAdapter = cls(api, options)
    return adapter
