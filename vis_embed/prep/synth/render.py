"""Pure rendering functions of the synthetic identity benchmark (PIL + numpy only).

Every function here is a deterministic function of plain, JSON-serialisable parameter dicts
(the same dicts that end up in the metadata files), so an image can always be re-rendered
from its metadata row and two images with equal identity parameters show the same object.

Three object *families* exist:

* ``object`` -- a flat shape with a two-colour pattern and a surface texture (ID-Rec,
  ID-Grd, ID-Edit, the semantic tasks);
* ``figure`` -- a stylised standing person (clothes colours, patterns, hair, bag): Re-ID;
* ``vehicle`` -- a side-view car/van/truck (body type, two-tone paint, stripes, rims):
  the held-out family, never trained on (Re-ID OOD).

An identity is rendered once onto a canonical RGBA *patch* (cached; the painters are
:mod:`.patches`, the names they paint :mod:`.palette`), which this module places into a
context: background, position, scale, rotation, horizontal flip, lighting and an optional
occluding bar.
"""

from __future__ import annotations

import functools
import io
import math
from typing import Any

import numpy as np
from PIL import Image, ImageDraw

from vis_embed.prep.synth.palette import BACKGROUND_COLOURS
from vis_embed.prep.synth.patches import PATCH_FRACTION, identity_patch


# ---------------------------------------------------------------------------------------------
# Context: background, placement, lighting, occlusion
# ---------------------------------------------------------------------------------------------

@functools.lru_cache(maxsize=8)
def _centred_grid(size: int) -> tuple[np.ndarray, np.ndarray]:
    coords = (np.arange(size, dtype=np.float32) + 0.5) / size - 0.5
    y, x = np.meshgrid(coords, coords, indexing="ij")
    return y, x


# Backgrounds are smooth (a linear gradient plus low-frequency blotches), so they are computed
# on a coarse grid and upsampled: identical look, a fraction of the cost.
_BACKGROUND_GRID = 16


# Backgrounds are tinted greys: each colour keeps this fraction of its distance from grey.
# Why: with fully coloured backgrounds drawn per image, the background dominates a random
# tiny model's pixel statistics, its untrained P@1 is at chance and contrastive training
# first collapses every embedding to one point and sits there for hundreds of steps
# (docs/calibration.md).  Tinted backgrounds keep the context varied (and "make the
# background green" still visibly green) while the object carries most of the signal.
BACKGROUND_SATURATION = 0.2
_GREY = np.float32(128.0)


def _tint(rgb: Any) -> np.ndarray:
    return _GREY + BACKGROUND_SATURATION * (np.asarray(rgb, dtype=np.float32) - _GREY)


def render_background(background: dict[str, Any], size: int) -> Image.Image:
    """RGB background: tinted base colour, linear gradient towards another tint, blotches."""
    base = _tint(BACKGROUND_COLOURS[background["colour"]])
    other = _tint(background["gradient_rgb"])
    y, x = _centred_grid(_BACKGROUND_GRID)
    angle = math.radians(background["gradient_angle"])
    ramp = (x * math.cos(angle) + y * math.sin(angle)) + 0.5  # 0..1 across the image
    ramp = np.clip(ramp, 0.0, 1.0)[..., None] * background["gradient_strength"]
    coarse = base * (1.0 - ramp) + other * ramp
    noise_rng = np.random.default_rng(background["noise_seed"])
    blotches = noise_rng.normal(0.0, 1.0, (6, 6)).astype(np.float32)
    blotch_image = Image.fromarray(blotches, mode="F").resize(
        (_BACKGROUND_GRID, _BACKGROUND_GRID), Image.Resampling.BICUBIC)
    coarse += np.asarray(blotch_image, dtype=np.float32)[..., None] * background["noise_amplitude"]
    coarse_image = Image.fromarray(np.clip(coarse + 0.5, 0, 255).astype(np.uint8), "RGB")
    return coarse_image.resize((size, size), Image.Resampling.BICUBIC)


def _place_patch(canvas: Image.Image, patch: Image.Image, placement: dict[str, Any],
                 size: int) -> list[float]:
    """Scale/flip/rotate ``patch`` and blend it onto ``canvas``; returns its pixel bbox."""
    if placement.get("flip"):
        patch = patch.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    longest = max(patch.size)
    target = max(4, int(round(placement["scale"] * size)))
    new_size = (max(2, round(patch.size[0] * target / longest)), max(2, round(patch.size[1] * target / longest)))
    patch = patch.resize(new_size, Image.Resampling.BILINEAR)
    if placement.get("rotation"):
        patch = patch.rotate(placement["rotation"], resample=Image.Resampling.BILINEAR, expand=True)
    cx, cy = placement["center"][0] * size, placement["center"][1] * size
    left, top = int(round(cx - patch.size[0] / 2)), int(round(cy - patch.size[1] / 2))
    canvas.paste(patch, (left, top), patch)
    alpha_box = patch.getchannel("A").getbbox()
    if alpha_box is None:
        return [0.0, 0.0, 1.0, 1.0]
    x0, y0, x1, y1 = alpha_box
    box = [max(0, x0 + left), max(0, y0 + top), min(size, x1 + left), min(size, y1 + top)]
    if box[2] <= box[0] or box[3] <= box[1]:
        return [0.0, 0.0, 1.0, 1.0]
    return [float(v) for v in box]


def _apply_lighting(image: Image.Image, lighting: dict[str, Any]) -> Image.Image:
    """Global brightness and colour cast, as one per-channel lookup table."""
    gains = lighting["brightness"] * np.asarray(lighting["tint"], dtype=np.float64)
    tables = np.clip(np.arange(256)[None, :] * gains[:, None] + 0.5, 0, 255).astype(np.uint8)
    pixels = np.asarray(image)
    lit = np.empty_like(pixels)
    for channel in range(3):
        lit[..., channel] = tables[channel][pixels[..., channel]]
    return Image.fromarray(lit, "RGB")


def compose(spec: dict[str, Any], size: int) -> tuple[Image.Image, list[list[float]]]:
    """Render one image from its spec; returns the image and the bbox of each placed object.

    ``spec = {"background": {...}, "objects": [{"family", "identity", "placement"}...],
    "lighting": {...}, "occluder": None | {"box": [x0, y0, x1, y1] fractions, "rgb": [...]}}``.
    Bboxes are ``[x0, y0, x1, y1]`` pixels of the visible extent (before occlusion).
    """
    canvas = render_background(spec["background"], size)
    patch_side = int(round(size * PATCH_FRACTION))
    boxes = []
    for placed in spec["objects"]:
        patch = identity_patch(placed["family"], placed["identity"], patch_side)
        boxes.append(_place_patch(canvas, patch, placed["placement"], size))
    occluder = spec.get("occluder")
    if occluder:
        draw = ImageDraw.Draw(canvas)
        x0, y0, x1, y1 = (v * size for v in occluder["box"])
        draw.rectangle([x0, y0, x1, y1], fill=tuple(occluder["rgb"]))
    return _apply_lighting(canvas, spec["lighting"]), boxes


def crop_window(box: list[float], margin: float, width: int, height: int) -> list[float]:
    """Square window around ``box`` grown by ``margin`` per side, shifted (never shrunk) into the image."""
    x0, y0, x1, y1 = box
    side = min(max(x1 - x0, y1 - y0) * (1.0 + 2 * margin), width, height)
    left = min(max((x0 + x1 - side) / 2, 0.0), width - side)
    top = min(max((y0 + y1 - side) / 2, 0.0), height - side)
    return [float(round(v)) for v in (left, top, left + side, top + side)]


def crop_to_box(image: Image.Image, box: list[float], margin: float, size: int) -> Image.Image:
    """The :func:`crop_window` of ``box``, resized to ``size`` x ``size``."""
    window = crop_window(box, margin, *image.size)
    return image.crop(tuple(int(v) for v in window)).resize((size, size), Image.Resampling.BILINEAR)


def png_bytes(image: Image.Image) -> bytes:
    """PNG encoding with fixed settings and no metadata chunks, so equal pixels -> equal bytes."""
    buffer = io.BytesIO()
    # Level 1: 3x faster than the default 6 for ~20% larger files (rendering is PNG-bound).
    image.save(buffer, format="PNG", compress_level=1, optimize=False)
    return buffer.getvalue()
