"""The identity painters: each family's identity rendered onto a canonical RGBA patch
(``object``: shape, pattern, texture; ``figure``: a stylised standing person; ``vehicle``: a
side view), cached by :func:`identity_patch`.  A pure function of the identity's parameters."""

from __future__ import annotations

import functools
import json
import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

from vis_embed.prep.synth.palette import (HAIR_COLOURS, OBJECT_COLOURS, RIM_COLOURS, SKIN_TONES, TROUSER_COLOURS,
                                      WINDOW_COLOURS)


# Canonical patch side as a fraction of the output image side.  Patches are rendered at
# SUPERSAMPLE times this and shrunk so edges are anti-aliased.
PATCH_FRACTION = 0.9
SUPERSAMPLE = 2


def _rgb(table: dict[str, tuple[int, int, int]], name: str | None) -> tuple[int, int, int]:
    return table[name] if name is not None else (0, 0, 0)


# ---------------------------------------------------------------------------------------------
# Object family
# ---------------------------------------------------------------------------------------------

def _regular_polygon(sides: int, radius: float, phase: float = -math.pi / 2) -> list[tuple[float, float]]:
    return [(radius * math.cos(phase + 2 * math.pi * k / sides),
             radius * math.sin(phase + 2 * math.pi * k / sides)) for k in range(sides)]


def _star(points: int, outer: float, inner: float) -> list[tuple[float, float]]:
    vertices = []
    for k in range(2 * points):
        radius = outer if k % 2 == 0 else inner
        angle = -math.pi / 2 + math.pi * k / points
        vertices.append((radius * math.cos(angle), radius * math.sin(angle)))
    return vertices


def _heart() -> list[tuple[float, float]]:
    vertices = []
    for k in range(64):
        t = 2 * math.pi * k / 64
        x = 16 * math.sin(t) ** 3
        y = 13 * math.cos(t) - 5 * math.cos(2 * t) - 2 * math.cos(3 * t) - math.cos(4 * t)
        vertices.append((x / 17.0, -y / 17.0 + 0.1))
    return vertices


def _shape_mask(shape: str, side: int) -> Image.Image:
    """Binary ("L") mask of ``shape`` filling a ``side`` x ``side`` canvas (radius ~0.95)."""
    mask = Image.new("L", (side, side), 0)
    draw = ImageDraw.Draw(mask)
    half = side / 2.0

    def to_pixels(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
        return [(half + x * half, half + y * half) for x, y in points]

    def disc(cx: float, cy: float, radius: float, fill: int) -> None:
        draw.ellipse([half + (cx - radius) * half, half + (cy - radius) * half,
                      half + (cx + radius) * half, half + (cy + radius) * half], fill=fill)

    sides = {"triangle": 3, "square": 4, "pentagon": 5, "hexagon": 6}
    if shape == "circle":
        disc(0, 0, 0.9, 255)
    elif shape in sides:
        phase = -math.pi / 4 if shape == "square" else -math.pi / 2
        radius = 0.95 if shape != "square" else 0.92
        draw.polygon(to_pixels(_regular_polygon(sides[shape], radius, phase)), fill=255)
    elif shape == "star":
        draw.polygon(to_pixels(_star(5, 0.97, 0.45)), fill=255)
    elif shape == "cross":
        arm = 0.33
        draw.polygon(to_pixels([(-arm, -0.9), (arm, -0.9), (arm, -arm), (0.9, -arm), (0.9, arm),
                                (arm, arm), (arm, 0.9), (-arm, 0.9), (-arm, arm), (-0.9, arm),
                                (-0.9, -arm), (-arm, -arm)]), fill=255)
    elif shape == "crescent":
        disc(0, 0, 0.9, 255)
        disc(0.42, -0.12, 0.7, 0)
    elif shape == "ring":
        disc(0, 0, 0.92, 255)
        disc(0, 0, 0.45, 0)
    elif shape == "heart":
        draw.polygon(to_pixels(_heart()), fill=255)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return mask


def _pattern_selector(identity: dict[str, Any], side: int) -> np.ndarray:
    """Boolean (side, side) array: True where the secondary colour shows."""
    coords = (np.arange(side, dtype=np.float32) + 0.5) / side * 2.0 - 1.0
    v, u = np.meshgrid(coords, coords, indexing="ij")
    pattern = identity["pattern"]
    freq = identity.get("pattern_freq") or 3
    angle = math.radians(identity.get("pattern_angle") or 0)
    along = u * math.cos(angle) + v * math.sin(angle)
    if pattern == "solid":
        return np.zeros((side, side), dtype=bool)
    if pattern == "stripes":
        return (np.floor((along + 1.0) * freq) % 2).astype(bool)
    if pattern == "checker":
        return ((np.floor((u + 1.0) * freq * 0.75) + np.floor((v + 1.0) * freq * 0.75)) % 2).astype(bool)
    if pattern == "halves":
        return along > 0
    if pattern == "quarters":
        across = -u * math.sin(angle) + v * math.cos(angle)
        return (along > 0) ^ (across > 0)
    if pattern == "rings":
        radius = np.sqrt(u * u + v * v)
        return (np.floor(radius * freq * 1.6) % 2).astype(bool)
    if pattern == "dots":
        spacing = 2.0 / (freq + 1)
        du = np.abs((u + 1.0) % spacing - spacing / 2)
        dv = np.abs((v + 1.0) % spacing - spacing / 2)
        return du * du + dv * dv < (spacing * 0.3) ** 2
    raise ValueError(f"unknown pattern {pattern!r}")


def _object_patch(identity: dict[str, Any], side: int) -> Image.Image:
    big = side * SUPERSAMPLE
    mask = _shape_mask(identity["shape"], big)
    primary = np.array(OBJECT_COLOURS[identity["primary"]], dtype=np.uint8)
    secondary = np.array(_rgb(OBJECT_COLOURS, identity.get("secondary")), dtype=np.uint8)
    selector = _pattern_selector(identity, big)
    rgb = np.where(selector[..., None], secondary, primary).astype(np.uint8)
    texture = identity["texture"]
    if texture == "speckled":
        # A fixed speckle layout per identity: part of what the object *is*.
        speckle_rng = np.random.default_rng(identity["texture_seed"])
        count = 40
        xs = speckle_rng.uniform(0.1, 0.9, count) * big
        ys = speckle_rng.uniform(0.1, 0.9, count) * big
        image = Image.fromarray(rgb)
        draw = ImageDraw.Draw(image)
        dot = big * 0.035
        for x, y in zip(xs, ys):
            shade = (250, 250, 250) if identity["primary"] == "black" else (20, 20, 20)
            draw.ellipse([x - dot, y - dot, x + dot, y + dot], fill=shade)
        rgb = np.asarray(image)
    elif texture == "outlined":
        # Erosion by thresholding a box blur: O(1) per pixel whatever the outline width
        # (a MinFilter of this size was the slowest step of the whole generator).
        inner = np.asarray(mask.filter(ImageFilter.BoxBlur(max(1, big // 56)))) >= 250
        outline = (np.asarray(mask) > 0) & ~inner
        shade = np.array((250, 250, 250) if identity["primary"] == "black" else (15, 15, 15), dtype=np.uint8)
        rgb = np.where(outline[..., None], shade, rgb).astype(np.uint8)
    elif texture != "smooth":
        raise ValueError(f"unknown texture {texture!r}")
    patch = Image.fromarray(rgb, "RGB").convert("RGBA")
    patch.putalpha(mask)
    return patch.resize((side, side), Image.Resampling.BOX)


# ---------------------------------------------------------------------------------------------
# Figure family (Re-ID)
# ---------------------------------------------------------------------------------------------

def _figure_patch(identity: dict[str, Any], side: int) -> Image.Image:
    """A standing person facing right, ``side`` tall and ``side // 2`` wide."""
    height, width = side * SUPERSAMPLE, side * SUPERSAMPLE // 2
    patch = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    draw = ImageDraw.Draw(patch)
    skin = SKIN_TONES[identity["skin"]]
    top = OBJECT_COLOURS[identity["top"]]
    top_second = _rgb(OBJECT_COLOURS, identity.get("top_secondary"))
    bottom = TROUSER_COLOURS[identity["bottom"]]
    w, h = width, height

    def box(x0: float, y0: float, x1: float, y1: float, fill: tuple[int, int, int]) -> None:
        draw.rectangle([x0 * w, y0 * h, x1 * w, y1 * h], fill=fill)

    # Bag behind the body (backpack) is drawn first so the torso covers part of it.
    bag = identity["bag"]
    bag_rgb = _rgb(OBJECT_COLOURS, identity.get("bag_colour"))
    if bag == "backpack":
        box(0.08, 0.24, 0.30, 0.50, bag_rgb)
    # Legs.
    if identity["bottom_style"] == "skirt":
        draw.polygon([(0.30 * w, 0.55 * h), (0.70 * w, 0.55 * h), (0.80 * w, 0.75 * h),
                      (0.20 * w, 0.75 * h)], fill=bottom)
        box(0.34, 0.75, 0.46, 0.96, skin)
        box(0.54, 0.75, 0.66, 0.96, skin)
    else:
        knee = 0.72 if identity["bottom_style"] == "shorts" else 0.96
        box(0.30, 0.55, 0.49, knee, bottom)
        box(0.51, 0.55, 0.70, knee, bottom)
        if knee < 0.96:
            box(0.33, knee, 0.46, 0.96, skin)
            box(0.54, knee, 0.67, 0.96, skin)
    box(0.28, 0.95, 0.48, 0.99, (30, 30, 30))
    box(0.52, 0.95, 0.76, 0.99, (30, 30, 30))
    # Torso and arms.
    box(0.26, 0.22, 0.74, 0.57, top)
    pattern = identity["top_pattern"]
    if pattern == "stripes":
        for k in range(4):
            y0 = 0.25 + k * 0.08
            box(0.26, y0, 0.74, y0 + 0.04, top_second)
    elif pattern == "split":
        box(0.50, 0.22, 0.74, 0.57, top_second)
    elif pattern == "logo":
        draw.ellipse([0.40 * w, 0.30 * h, 0.68 * w, 0.30 * h + 0.28 * w], fill=top_second)
    sleeve = top if identity["sleeves"] == "long" else skin
    box(0.14, 0.23, 0.26, 0.50, sleeve)
    box(0.74, 0.23, 0.86, 0.50, sleeve)
    box(0.14, 0.23, 0.26, 0.30, top)
    box(0.74, 0.23, 0.86, 0.30, top)
    if bag == "handbag":
        box(0.78, 0.44, 0.98, 0.56, bag_rgb)
    # Head, hair / hat.
    draw.ellipse([0.32 * w, 0.04 * h, 0.68 * w, 0.04 * h + 0.36 * w], fill=skin)
    if identity["headwear"] == "hat":
        hat = _rgb(OBJECT_COLOURS, identity.get("hat_colour"))
        box(0.28, 0.02, 0.72, 0.07, hat)
        box(0.60, 0.06, 0.86, 0.08, hat)
    else:
        hair = HAIR_COLOURS[identity["hair"]]
        draw.chord([0.31 * w, 0.03 * h, 0.69 * w, 0.03 * h + 0.38 * w], 180, 360, fill=hair)
    return patch.resize((side // 2, side), Image.Resampling.BOX)


# ---------------------------------------------------------------------------------------------
# Vehicle family (held out, OOD)
# ---------------------------------------------------------------------------------------------

def _vehicle_patch(identity: dict[str, Any], side: int) -> Image.Image:
    """A side view facing right, ``side`` wide and ``side // 2`` tall."""
    width, height = side * SUPERSAMPLE, side * SUPERSAMPLE // 2
    patch = Image.new("RGBA", (width, height), (0, 0, 0, 0))
    draw = ImageDraw.Draw(patch)
    w, h = width, height
    body = OBJECT_COLOURS[identity["body_colour"]]
    roof = OBJECT_COLOURS[identity["roof_colour"]]
    window = WINDOW_COLOURS[identity["windows"]]
    outlines = {
        "sedan": ([(0.02, 0.55), (0.98, 0.55), (0.98, 0.80), (0.02, 0.80)],
                  [(0.22, 0.55), (0.34, 0.25), (0.68, 0.25), (0.80, 0.55)]),
        "hatchback": ([(0.05, 0.55), (0.95, 0.55), (0.95, 0.80), (0.05, 0.80)],
                      [(0.08, 0.55), (0.14, 0.22), (0.62, 0.22), (0.78, 0.55)]),
        "van": ([(0.03, 0.20), (0.82, 0.20), (0.97, 0.50), (0.97, 0.80), (0.03, 0.80)], []),
        "pickup": ([(0.02, 0.50), (0.98, 0.50), (0.98, 0.80), (0.02, 0.80)],
                   [(0.50, 0.50), (0.55, 0.18), (0.80, 0.18), (0.90, 0.50)]),
        "bus": ([(0.01, 0.08), (0.99, 0.08), (0.99, 0.82), (0.01, 0.82)], []),
    }
    lower, cabin = outlines[identity["body"]]
    to_px = lambda points: [(x * w, y * h) for x, y in points]  # noqa: E731
    if cabin:
        draw.polygon(to_px(cabin), fill=roof)
        centre_x = sum(x for x, _ in cabin) / len(cabin)
        centre_y = sum(y for _, y in cabin) / len(cabin)
        glass = [(centre_x + 0.72 * (x - centre_x), centre_y + 0.72 * (y - centre_y)) for x, y in cabin]
        draw.polygon(to_px(glass), fill=window)
    draw.polygon(to_px(lower), fill=body)
    if identity["body"] in ("van", "bus"):
        draw.rectangle([0.03 * w, 0.20 * h if identity["body"] == "van" else 0.08 * h,
                        0.97 * w if identity["body"] == "bus" else 0.82 * w,
                        0.30 * h], fill=roof)
        for k in range(4 if identity["body"] == "bus" else 2):
            x0 = 0.08 + k * (0.22 if identity["body"] == "bus" else 0.30)
            draw.rectangle([x0 * w, 0.33 * h, (x0 + 0.16) * w, 0.50 * h], fill=window)
    stripe = identity["stripe"]
    stripe_rgb = _rgb(OBJECT_COLOURS, identity.get("stripe_colour"))
    if stripe in ("single", "double"):
        draw.rectangle([0.04 * w, 0.62 * h, 0.96 * w, 0.67 * h], fill=stripe_rgb)
    if stripe == "double":
        draw.rectangle([0.04 * w, 0.71 * h, 0.96 * w, 0.75 * h], fill=stripe_rgb)
    rim = RIM_COLOURS[identity["rims"]]
    for cx in (0.22, 0.78):
        radius = 0.17 * h * 1.0
        draw.ellipse([cx * w - radius, 0.80 * h - radius, cx * w + radius, 0.80 * h + radius],
                     fill=(20, 20, 20))
        draw.ellipse([cx * w - radius * 0.5, 0.80 * h - radius * 0.5, cx * w + radius * 0.5,
                      0.80 * h + radius * 0.5], fill=rim)
    return patch.resize((side, side // 2), Image.Resampling.BOX)


_PATCH_RENDERERS = {"object": _object_patch, "figure": _figure_patch, "vehicle": _vehicle_patch}


@functools.lru_cache(maxsize=4096)
def _cached_patch(family: str, identity_json: str, side: int) -> Image.Image:
    return _PATCH_RENDERERS[family](json.loads(identity_json), side)


def identity_patch(family: str, identity: dict[str, Any], side: int) -> Image.Image:
    """The canonical RGBA rendering of one identity (cached: identities repeat across images)."""
    return _cached_patch(family, json.dumps(identity, sort_keys=True), side)
