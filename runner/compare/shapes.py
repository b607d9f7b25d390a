"""The shapes a comparison measures at a level: every target shape but the held-out
ones (full), or the representative shapes and a quick round's unannounced shape
(quick).  Every flow that opens a round and the comparison loop's probe guard
(``runner.compare.loop.probe_veto``) read them from here."""

from __future__ import annotations

from runner.core.errors import ConfigError
from runner.core.shapes import Shape, shape_set, shapes_by_label
from runner.judge.probe import probe_shape
from runner.store.manifest import Manifest


def all_shapes(m: Manifest) -> list[Shape]:
    if m.target_shapes == "all":
        return shape_set(m.shape_set)
    return shapes_by_label(m.shape_set, m.target_shapes, "target_shapes")


def level_shapes(m: Manifest, level: str, round_n: int | None = None) -> list[Shape]:
    """The shapes a round measures: never a held-out one (``campaign accept`` does);
    a quick VALIDATE round (``round_n``) also measures its unannounced shape
    (``round_probe``)."""
    held = set(m.heldout_shapes)
    shapes = [s for s in all_shapes(m) if s.label not in held]
    if level == "full":
        return shapes
    if level != "quick":
        raise ConfigError(f"--level must be quick or full, not {level!r}")
    if not m.representative_shapes:
        raise ConfigError(
            "the manifest names no representative shapes for a quick round: before the "
            "baseline, run `campaign baseline` (it picks them); after it, name 3-5 labels "
            "of its PASS rows with `campaign set representative_shapes [A, B, C] --reason "
            "TEXT`, or measure every shape with --level full"
        )
    chosen = set(m.representative_shapes)
    probe = round_probe(m, level, round_n) if round_n is not None else None
    return [s for s in shapes if s.label in chosen] + ([probe] if probe else [])


def round_probe(m: Manifest, level: str, round_n: int) -> Shape | None:
    """Round ``round_n``'s unannounced shape at the quick level (``runner.judge.probe``;
    none at the full level, which measures every target), drawn from the campaign's name
    and base commit and the round number; written nowhere before the round."""
    if level != "quick" or round_n < 2 or not m.representative_shapes:
        return None
    rep = shapes_by_label(m.shape_set, m.representative_shapes, "representative_shapes")
    known = [*shape_set(m.shape_set), *all_shapes(m)]
    return probe_shape(rep, known, round_n, f"{m.campaign_name}:{m.base_commit}")
