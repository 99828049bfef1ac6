"""Random draws of identities, near-identity look-alikes and contexts (the edits: :mod:`.edits`).

Everything random in the generator goes through a ``numpy.random.Generator`` passed in by
the caller, so the whole benchmark is a function of ``--seed``.  Identity parameters (what
an object *is*) and context parameters (where/how it is seen) are kept in separate dicts;
the tests rely on that separation.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from vis_embed.prep.synth.palette import (
    BACKGROUND_COLOURS, COLOUR_NEIGHBOURS, HAIR_COLOURS, OBJECT_COLOURS, PATTERN_NEIGHBOURS,
    PATTERNS, RIM_COLOURS, SHAPE_NEIGHBOURS, SHAPES, SKIN_TONES, TEXTURES, TROUSER_COLOURS,
    VEHICLE_BODIES, WINDOW_COLOURS,
)

Params = dict[str, Any]
_FREQ_PATTERNS = ("stripes", "checker", "rings", "dots")


def pick(rng: np.random.Generator, options: Any, exclude: Any = ()) -> Any:
    choices = [o for o in options if o not in exclude]
    return choices[int(rng.integers(len(choices)))]


def identity_signature(params: Params) -> str:
    """Canonical string of the identity-defining parameters (for uniqueness checks)."""
    return "|".join(f"{k}={params[k]}" for k in sorted(params) if k != "texture_seed")


# ---------------------------------------------------------------------------------------------
# Identities
# ---------------------------------------------------------------------------------------------

def _finish_object(params: Params) -> Params:
    """Drop parameters that have no visible effect so equal-looking objects compare equal."""
    if params["pattern"] == "solid":
        params["secondary"] = None
    if params["pattern"] not in _FREQ_PATTERNS:
        params["pattern_freq"] = None
    params["texture_seed"] = (zlib.crc32(identity_signature(params).encode()) & 0x7FFFFFFF
                              if params["texture"] == "speckled" else None)
    return params


def sample_object(rng: np.random.Generator) -> Params:
    primary = pick(rng, OBJECT_COLOURS)
    return _finish_object({
        "shape": pick(rng, SHAPES),
        "pattern": pick(rng, PATTERNS),
        "primary": primary,
        "secondary": pick(rng, OBJECT_COLOURS, exclude=(primary,)),
        "pattern_freq": int(rng.integers(2, 5)),
        "texture": pick(rng, TEXTURES),
    })


def sample_figure(rng: np.random.Generator) -> Params:
    top = pick(rng, OBJECT_COLOURS)
    headwear = pick(rng, ("none", "none", "hat"))
    top_pattern = pick(rng, ("solid", "stripes", "split", "logo"))
    bag = pick(rng, ("none", "backpack", "handbag"))
    return {
        "skin": pick(rng, SKIN_TONES),
        "headwear": headwear,
        "hair": pick(rng, HAIR_COLOURS) if headwear == "none" else None,
        "hat_colour": pick(rng, OBJECT_COLOURS) if headwear == "hat" else None,
        "top": top,
        "top_pattern": top_pattern,
        "top_secondary": None if top_pattern == "solid" else pick(rng, OBJECT_COLOURS, exclude=(top,)),
        "sleeves": pick(rng, ("long", "short")),
        "bottom": pick(rng, TROUSER_COLOURS),
        "bottom_style": pick(rng, ("trousers", "trousers", "shorts", "skirt")),
        "bag": bag,
        "bag_colour": None if bag == "none" else pick(rng, OBJECT_COLOURS),
    }


def sample_vehicle(rng: np.random.Generator) -> Params:
    body_colour = pick(rng, OBJECT_COLOURS)
    stripe = pick(rng, ("none", "single", "double"))
    return {
        "body": pick(rng, VEHICLE_BODIES),
        "body_colour": body_colour,
        "roof_colour": body_colour if rng.random() < 0.5 else pick(rng, OBJECT_COLOURS, exclude=(body_colour,)),
        "windows": pick(rng, WINDOW_COLOURS),
        "stripe": stripe,
        "stripe_colour": None if stripe == "none" else pick(rng, OBJECT_COLOURS, exclude=(body_colour,)),
        "rims": pick(rng, RIM_COLOURS),
    }


SAMPLERS = {"object": sample_object, "figure": sample_figure, "vehicle": sample_vehicle}
# Attributes two identities of one evaluation gallery must differ in at least two of: keeps
# held-out galleries about identities rather than about indistinguishable twins (look-alikes
# are measured separately, by the NearID set).
_DISTINCTNESS_KEYS = {
    "object": ("shape", "pattern", "primary", "secondary"),
    "figure": ("top", "top_pattern", "bottom", "bag", "hair", "hat_colour"),
    "vehicle": ("body", "body_colour", "roof_colour", "stripe", "rims"),
}


def sample_identities(rng: np.random.Generator, family: str, count: int, taken: set[str],
                      min_differences: int = 0, keep_apart: tuple[Params, ...] = ()) -> list[Params]:
    """``count`` new identities whose signatures are not in ``taken`` (which is updated).

    With ``min_differences`` > 0, every pair of the returned identities (and each of them and
    every identity of ``keep_apart``) differs in at least that many of the family's main
    attributes.
    """
    keys = _DISTINCTNESS_KEYS[family]
    chosen: list[Params] = []
    attempts = 0
    while len(chosen) < count:
        attempts += 1
        if attempts > 200 * count + 1000:
            raise RuntimeError(f"could not draw {count} distinct {family} identities")
        params = SAMPLERS[family](rng)
        signature = identity_signature(params)
        if signature in taken:
            continue
        if min_differences and any(
                sum(params[k] != other[k] for k in keys) < min_differences
                for other in (*keep_apart, *chosen)):
            continue
        taken.add(signature)
        chosen.append(params)
    return chosen


def _claim(params: Params, taken: set[str]) -> bool:
    """Add the identity's signature to ``taken``; False when another identity already has it."""
    signature = identity_signature(params)
    if signature in taken:
        return False
    taken.add(signature)
    return True


def _change_figure_detail(rng: np.random.Generator, params: Params, anchor: Params, attribute: str) -> None:
    """Set a figure's ``bottom``, ``bag`` or ``top_pattern`` (in ``params``) to another value
    than ``anchor``'s: the changes look-alikes and family variants share."""
    if attribute == "bottom":
        params["bottom"] = pick(rng, TROUSER_COLOURS, exclude=(anchor["bottom"],))
    elif attribute == "bag":
        params["bag"] = pick(rng, ("none", "backpack", "handbag"), exclude=(anchor["bag"],))
        params["bag_colour"] = (None if params["bag"] == "none"
                                else anchor["bag_colour"] or pick(rng, OBJECT_COLOURS))
    elif attribute == "top_pattern":
        params["top_pattern"] = pick(rng, ("solid", "stripes", "split", "logo"), exclude=(anchor["top_pattern"],))
        params["top_secondary"] = (None if params["top_pattern"] == "solid" else anchor["top_secondary"]
                                   or pick(rng, OBJECT_COLOURS, exclude=(anchor["top"],)))
    else:
        raise ValueError(f"unknown figure detail {attribute!r}")


def make_lookalike(rng: np.random.Generator, family: str, anchor: Params,
                   taken: set[str]) -> tuple[Params, str] | None:
    """A near-identity distractor: ``anchor`` with exactly one identity attribute nudged.

    Returns the new identity and the name of the changed attribute, or None when every
    look-alike of ``anchor`` is already an identity (happens for the few solid-colour
    objects at the ``full`` scale).  The change is always visible (never a parameter that
    the rendering ignores) and small (a neighbouring hue, a similar shape or pattern).
    """
    for _ in range(100):
        params = dict(anchor)
        if family == "object":
            attribute = pick(rng, ("primary", "secondary", "shape", "pattern", "texture")
                              if anchor["pattern"] != "solid" else ("primary", "shape", "pattern", "texture"))
            if attribute == "primary":
                params["primary"] = pick(rng, COLOUR_NEIGHBOURS[anchor["primary"]], exclude=(anchor["secondary"],))
            elif attribute == "secondary":
                params["secondary"] = pick(rng, COLOUR_NEIGHBOURS[anchor["secondary"]], exclude=(anchor["primary"],))
            elif attribute == "shape":
                params["shape"] = pick(rng, SHAPE_NEIGHBOURS[anchor["shape"]])
            elif attribute == "pattern":
                params["pattern"] = pick(rng, PATTERN_NEIGHBOURS[anchor["pattern"]])
                if params["secondary"] is None:
                    params["secondary"] = pick(rng, COLOUR_NEIGHBOURS[anchor["primary"]])
                if params["pattern_freq"] is None:
                    params["pattern_freq"] = 3
            else:
                params["texture"] = pick(rng, TEXTURES, exclude=(anchor["texture"],))
            params = _finish_object(params)
        elif family == "figure":
            attribute = pick(rng, ("top", "bottom", "bag", "top_pattern"))
            if attribute == "top":
                params["top"] = pick(rng, COLOUR_NEIGHBOURS[anchor["top"]], exclude=(anchor["top_secondary"],))
            else:
                _change_figure_detail(rng, params, anchor, attribute)
        else:
            raise ValueError(f"no look-alikes for family {family!r}")
        if _claim(params, taken):
            return params, attribute
    return None


# ---------------------------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------------------------

def sample_background(rng: np.random.Generator, avoid: tuple[str, ...] = ()) -> Params:
    return {
        "colour": pick(rng, BACKGROUND_COLOURS, exclude=avoid),
        "gradient_rgb": [int(v) for v in rng.integers(0, 256, 3)],
        "gradient_angle": round(float(rng.uniform(0, 360)), 2),
        "gradient_strength": round(float(rng.uniform(0.0, 0.6)), 3),
        "noise_seed": int(rng.integers(0, 2**31 - 1)),
        "noise_amplitude": round(float(rng.uniform(2.0, 10.0)), 2),
    }


# Global lighting changes (brightness, colour cast) move every pixel of an image at once; at full
# strength they, like strongly coloured backgrounds, swamp the object for a random tiny model
# and contrastive training collapses (docs/calibration.md).  Contexts keep a mild version.
LIGHTING_SPREAD = 0.35


def sample_lighting(rng: np.random.Generator, spread: float = LIGHTING_SPREAD) -> Params:
    return {
        "brightness": round(float(1.0 + rng.uniform(-0.28, 0.25) * spread), 3),
        "tint": [round(float(1.0 + rng.uniform(-0.1, 0.1) * spread), 3) for _ in range(3)],
    }


# Scale is the subject's longest side as a fraction of the image side.
_SCALE_RANGE = {"object": (0.42, 0.78), "figure": (0.62, 0.95), "vehicle": (0.62, 0.95)}
_ROTATION_RANGE = {"object": 180.0, "figure": 8.0, "vehicle": 6.0}


def sample_placement(rng: np.random.Generator, family: str, centred: bool = False) -> Params:
    low, high = _SCALE_RANGE[family]
    scale = float(rng.uniform(low, high)) if not centred else float(rng.uniform(0.42, 0.52))
    # Keep at least ~80% of the subject inside the frame.
    slack = max(0.0, 0.5 - 0.4 * scale)
    jitter = slack if not centred else 0.04
    return {
        "center": [round(0.5 + float(rng.uniform(-jitter, jitter)), 4),
                   round(0.5 + float(rng.uniform(-jitter, jitter)), 4)],
        "scale": round(scale, 4),
        "rotation": round(float(rng.uniform(-1, 1) * _ROTATION_RANGE[family]), 2),
        "flip": bool(family != "object" and rng.random() < 0.5),
    }


def sample_occluder(rng: np.random.Generator, placement: Params, probability: float = 0.3) -> Params | None:
    """A grey bar across part of the subject, covering roughly 10-25% of it, or None."""
    if rng.random() >= probability:
        return None
    cx, cy = placement["center"]
    half = placement["scale"] / 2
    thickness = float(rng.uniform(0.18, 0.32)) * placement["scale"]
    offset = float(rng.uniform(-0.7, 0.7)) * half
    if rng.random() < 0.5:  # vertical bar
        box = [cx + offset - thickness / 2, cy - 1.2 * half, cx + offset + thickness / 2, cy + 1.2 * half]
    else:
        box = [cx - 1.2 * half, cy + offset - thickness / 2, cx + 1.2 * half, cy + offset + thickness / 2]
    grey = int(rng.integers(50, 210))
    return {"box": [round(v, 4) for v in box], "rgb": [grey, grey, grey]}


def avoid_colours(family: str, identity: Params) -> tuple[str, ...]:
    # A red object on a background named red would be the benchmark testing camouflage.
    return (identity.get("primary"),) if family == "object" else ()


def sample_context(rng: np.random.Generator, family: str, identity: Params,
                   occlusion_probability: float = 0.3) -> Params:
    placement = sample_placement(rng, family)
    return {
        "background": sample_background(rng, avoid=avoid_colours(family, identity)),
        "placement": placement,
        "lighting": sample_lighting(rng),
        "occluder": sample_occluder(rng, placement, occlusion_probability),
    }


def single_spec(family: str, identity: Params, context: Params) -> Params:
    """Render spec (see ``render.compose``) of one subject in one context."""
    return {
        "background": context["background"],
        "objects": [{"family": family, "identity": identity, "placement": context["placement"]}],
        "lighting": context["lighting"],
        "occluder": context["occluder"],
    }


def sample_scene_placements(rng: np.random.Generator, count: int) -> list[Params]:
    """Non-overlapping placements for ``count`` (<= 4) objects: one per grid quadrant."""
    quadrants = rng.permutation(4)[:count]
    placements = []
    for quadrant in quadrants:
        base_x, base_y = 0.27 + 0.46 * (quadrant % 2), 0.27 + 0.46 * (quadrant // 2)
        placements.append({
            "center": [round(base_x + float(rng.uniform(-0.04, 0.04)), 4),
                       round(base_y + float(rng.uniform(-0.04, 0.04)), 4)],
            "scale": round(float(rng.uniform(0.32, 0.42)), 4),
            "rotation": round(float(rng.uniform(-180, 180)), 2),
            "flip": False,
        })
    return placements


# Attributes a dense-preset family variant may change (docs/synth.md, `small-dense`): the
# object's primary colour and the person's top colour are left alone so that a family keeps
# its dominant look and the variants differ from the anchor in a detail.
_VARIANT_ATTRIBUTES = {
    "object": ("secondary", "shape", "pattern", "texture"),
    "figure": ("bottom", "bag", "top_pattern", "sleeves"),
}


def make_variant(rng: np.random.Generator, family: str, anchor: Params,
                 taken: set[str]) -> tuple[Params, str] | None:
    """A family variant of ``anchor``: one detail attribute set to *any* other value.

    Unlike :func:`make_lookalike` (a neighbouring hue or shape, often too close for a tiny
    model to tell apart) the change is always clearly visible, so the variant is a hard
    negative a small model can learn from.  Returns ``(params, changed attribute)``, or None
    when 100 draws only found identities already in ``taken`` (which is updated).
    """
    for _ in range(100):
        params = dict(anchor)
        attribute = pick(rng, _VARIANT_ATTRIBUTES[family])
        if family == "object":
            if attribute == "secondary" and params["secondary"] is None:
                attribute = "pattern"  # a solid object has no secondary colour to change
            if attribute == "secondary":
                params["secondary"] = pick(rng, OBJECT_COLOURS, exclude=(anchor["primary"], anchor["secondary"]))
            elif attribute == "shape":
                params["shape"] = pick(rng, SHAPES, exclude=(anchor["shape"],))
            elif attribute == "pattern":
                params["pattern"] = pick(rng, PATTERNS, exclude=(anchor["pattern"],))
                if params["secondary"] is None:
                    params["secondary"] = pick(rng, OBJECT_COLOURS, exclude=(anchor["primary"],))
                if params["pattern_freq"] is None:
                    params["pattern_freq"] = int(rng.integers(2, 5))
            else:
                params["texture"] = pick(rng, TEXTURES, exclude=(anchor["texture"],))
            params = _finish_object(params)
        elif family == "figure":
            if attribute == "sleeves":
                params["sleeves"] = "short" if anchor["sleeves"] == "long" else "long"
            else:
                _change_figure_detail(rng, params, anchor, attribute)
        else:
            raise ValueError(f"no family variants for family {family!r}")
        if _claim(params, taken):
            return params, attribute
    return None


def stream_rng(seed: int, stream: str) -> np.random.Generator:
    """An independent generator per named stream, so each dataset's draws stand alone."""
    return np.random.default_rng([seed, zlib.crc32(stream.encode())])


def context_meta(context: Params) -> Params:
    return {"background": context["background"], "placement": context["placement"],
            "lighting": context["lighting"], "occluder": context["occluder"]}
