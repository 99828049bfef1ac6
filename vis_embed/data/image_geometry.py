"""Image geometry that needs no decoding: the aspect-ratio fix and bounding boxes.

* An extreme aspect ratio (4000 x 2) is padded, not refused: Qwen's resize rule
  (``smart_resize``) rejects a long/short side ratio above :data:`MAX_ASPECT_RATIO` (200), so
  :func:`fit_aspect_ratio` pads the short side with black up to that ratio (content kept
  whole, centred), scaling a sliver down first when its canvas would exceed a pixel budget.
* :func:`bbox_outside` is the one bbox-inside-image rule; :func:`crop_to_bbox` applies it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from PIL import Image

from vis_embed.errors import DataError

MAX_ASPECT_RATIO = 200


def check_has_pixels(image: Image.Image, name: str | None = None) -> None:
    """DataError for an image with a side of 0 pixels (the processor would divide by it)."""
    if image.width < 1 or image.height < 1:
        raise DataError(f"image has no pixels ({image.width}x{image.height})", path=name, field="image")


def fit_aspect_ratio(image: Image.Image, max_ratio: int = MAX_ASPECT_RATIO,
                     max_pixels: int | None = None) -> Image.Image:
    """``image`` unchanged, or centred on a black canvas whose short side is long enough that
    long/short <= ``max_ratio`` (the processor's limit; see the module notes).

    The canvas grows with the square of the long side (a 178-byte 300000 x 1 PNG asked for a
    300000 x 1500 canvas: 1.8 GB of RGB, more in the processor), so with ``max_pixels`` an image
    whose canvas would hold more is first scaled down until the canvas fits, before anything
    is allocated; the processor resizes the canvas to its pixel budget anyway."""
    width, height = image.size
    check_has_pixels(image)
    canvas_size = fitted_size(width, height, max_ratio)
    if canvas_size == (width, height):
        return image
    if max_pixels is not None and canvas_size[0] * canvas_size[1] > max_pixels:
        image = image.resize(bounded_sliver(width, height, max_pixels, max_ratio), Image.Resampling.BOX)
        width, height = image.size
        canvas_size = fitted_size(width, height, max_ratio)
    canvas = Image.new(image.mode, canvas_size)
    canvas.paste(image, ((canvas_size[0] - width) // 2, (canvas_size[1] - height) // 2))
    return canvas


def bounded_sliver(width: int, height: int, max_pixels: int, max_ratio: int = MAX_ASPECT_RATIO) -> tuple[int, int]:
    """A sliver's (width, height) scaled down so that its :func:`fitted_size` canvas holds at
    most ``max_pixels``: its long side L keeps L x ceil(L / max_ratio) <= (L^2 + max_ratio L) / max_ratio
    within it."""
    long_side = max(1, (math.isqrt(max_ratio * max_ratio + 4 * max_ratio * max_pixels) - max_ratio) // 2)
    scale = min(1.0, long_side / max(width, height))
    return max(1, math.floor(width * scale)), max(1, math.floor(height * scale))


def fitted_size(width: int, height: int, max_ratio: int = MAX_ASPECT_RATIO) -> tuple[int, int]:
    """(width, height) after :func:`fit_aspect_ratio`: the short side grown until
    long/short <= ``max_ratio``."""
    if max(width, height) <= max_ratio * min(width, height):
        return width, height
    short_side = -(-max(width, height) // max_ratio)  # ceil: the smallest side that is within the limit
    return (width, short_side) if width > height else (short_side, height)


def bbox_outside(bbox: Sequence[float], width: int, height: int, name: str | None = None) -> str | None:
    """The one bbox-inside-image rule (training rows at load, the model's crop, the server's
    request): why ``bbox`` does not fit a ``width`` x ``height`` image, or None when it does.
    (Order and non-negative corners are the item contract's: data/items.check_bbox.)"""
    if bbox[2] > width or bbox[3] > height:
        return f"box {list(bbox)} lies outside the {width}x{height} image" + (f" {name}" if name else "")
    if round(bbox[2]) <= round(bbox[0]) or round(bbox[3]) <= round(bbox[1]):  # crop_to_bbox's rounding
        return (f"box {list(bbox)} covers no whole pixel of the {width}x{height} image"
                + (f" {name}" if name else "") + " (a bbox is in pixels, not fractions of the image)")
    return None


def crop_to_bbox(image: Image.Image, bbox: list[float], name: str | None = None) -> Image.Image:
    """``image`` (as loaded: RGB, EXIF-upright) cropped to ``bbox = [x0, y0, x1, y1]`` pixels.

    The box is in the frame of the image *as displayed*, the frame in which an uncropped
    item reaches the model; a box reaching past the image is an error, not a silent clamp.
    """
    x0, y0, x1, y1 = bbox
    if (problem := bbox_outside(bbox, image.width, image.height, name)) is not None:
        raise DataError(problem, field="bbox")
    return image.crop((round(x0), round(y0), round(x1), round(y1)))
