"""Edits (ID-Edit): context changes described in words; the identity never changes."""

from __future__ import annotations

import numpy as np

from vis_embed.prep.synth.palette import BACKGROUND_COLOURS
from vis_embed.prep.synth.sampling import (LIGHTING_SPREAD, Params, avoid_colours, pick, sample_background,
                                      sample_lighting, sample_placement)


EDIT_KINDS: tuple[str, ...] = ("background", "move", "scale", "lighting")
_MOVES = {"left": (-0.2, 0.0), "right": (0.2, 0.0), "up": (0.0, -0.2), "down": (0.0, 0.2)}
_OPPOSITE = {"left": "right", "right": "left", "up": "down", "down": "up",
             "bigger": "smaller", "smaller": "bigger", "darker": "brighter", "brighter": "darker"}


def sample_edit_base(rng: np.random.Generator, identity: Params) -> Params:
    """A neutral context (centred, medium size, no occluder) that every edit can change visibly."""
    return {
        "background": sample_background(rng, avoid=avoid_colours("object", identity)),
        "placement": sample_placement(rng, "object", centred=True),
        "lighting": sample_lighting(rng, spread=0.3 * LIGHTING_SPREAD),
        "occluder": None,
    }


def sample_edit(rng: np.random.Generator, context: Params, kind: str | None = None,
                exclude_values: tuple[str, ...] = ()) -> Params:
    """``{"kind", "value", "instruction"}`` applicable to ``context``."""
    kind = kind or pick(rng, EDIT_KINDS)
    if kind == "background":
        value = pick(rng, BACKGROUND_COLOURS, exclude=(context["background"]["colour"], *exclude_values))
        instruction = f"make the background {value}"
    elif kind == "move":
        value = pick(rng, _MOVES, exclude=exclude_values)
        instruction = f"move the object {'to the ' if value in ('left', 'right') else ''}{value}"
    elif kind == "scale":
        value = pick(rng, ("bigger", "smaller"), exclude=exclude_values)
        instruction = f"make the object {value}"
    elif kind == "lighting":
        value = pick(rng, ("darker", "brighter"), exclude=exclude_values)
        instruction = f"make the image {value}"
    else:
        raise ValueError(f"unknown edit kind {kind!r}")
    return {"kind": kind, "value": value, "instruction": instruction}


def contrary_edit(edit: Params, context: Params, rng: np.random.Generator) -> Params:
    """The same kind of edit with a different value (the instruction-following distractor)."""
    if edit["kind"] == "background":
        return sample_edit(rng, context, "background", exclude_values=(edit["value"],))
    value = _OPPOSITE[edit["value"]]
    return sample_edit(rng, context, edit["kind"], exclude_values=tuple(
        v for v in (*_MOVES, "bigger", "smaller", "darker", "brighter") if v != value))


def apply_edit(context: Params, edit: Params) -> Params:
    """The context after ``edit``; the identity is untouched by construction."""
    edited = {key: (dict(value) if isinstance(value, dict) else value) for key, value in context.items()}
    if edit["kind"] == "background":
        edited["background"]["colour"] = edit["value"]
    elif edit["kind"] == "move":
        dx, dy = _MOVES[edit["value"]]
        center = edited["placement"]["center"]
        edited["placement"]["center"] = [round(center[0] + dx, 4), round(center[1] + dy, 4)]
    elif edit["kind"] == "scale":
        factor = 1.6 if edit["value"] == "bigger" else 0.6
        edited["placement"]["scale"] = round(edited["placement"]["scale"] * factor, 4)
    elif edit["kind"] == "lighting":
        factor = 0.55 if edit["value"] == "darker" else 1.45
        edited["lighting"]["brightness"] = round(edited["lighting"]["brightness"] * factor, 3)
    return edited
