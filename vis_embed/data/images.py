"""Loading images from paths, URLs or PIL objects into RGB, with errors a user can act on.

* Any PIL mode becomes RGB: transparency (RGBA, LA, P with a transparent index) is composited
  on white rather than dropped to black; 16-bit and 32-bit greyscale (I;16, I, F) are scaled
  to 8 bits instead of being clipped to white; CMYK/YCbCr/L go through PIL's converters.
* EXIF orientation is applied so phone photos are upright.
* Decompression bombs (more than ``max_image_pixels`` pixels, default PIL's limit of about
  89 megapixels) are refused from the header alone, before any pixel is decoded.
* A missing, unreadable or corrupt file raises :class:`DataError` naming the file.

Resizing to the model's pixel budget (min/max pixels) is the processor's job, not ours.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vis_embed.errors import DataError

DEFAULT_MAX_IMAGE_PIXELS = int(Image.MAX_IMAGE_PIXELS or 89_478_485)
URL_PREFIXES = ("http://", "https://")
URL_TIMEOUT_S = 30


def is_url(source: Any) -> bool:
    """True for an http(s) URL string (fetched, never resolved against a folder)."""
    return isinstance(source, str) and source.startswith(URL_PREFIXES)


def resolve_image(source: str | Path, base_dir: str | Path | None = None) -> str:
    """The image's location as a string: a URL unchanged; a path with ``~`` expanded, made
    relative to ``base_dir`` unless absolute (no ``base_dir``: the working directory), normalised."""
    if is_url(source):
        return str(source)
    path = os.path.expanduser(str(source))
    if base_dir is not None:
        path = os.path.join(base_dir, path)  # an absolute ``path`` wins: join drops base_dir
    return os.path.normpath(path)


def _fetch_url(url: str) -> bytes:
    import urllib.request

    request = urllib.request.Request(url, headers={"User-Agent": "vis_embed"})
    try:
        with urllib.request.urlopen(request, timeout=URL_TIMEOUT_S) as response:  # noqa: S310
            return response.read()
    except Exception as exc:  # network errors come in many classes; all mean "cannot fetch"
        raise DataError(f"cannot fetch image URL ({type(exc).__name__}: {exc})", path=url) from None


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to RGB (see module docstring for the choices made)."""
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        values = np.asarray(image, dtype=np.float64)
        peak = 65535.0 if image.mode.startswith("I;16") else max(float(values.max()), 255.0)
        grey = np.clip(np.round(values * (255.0 / peak)), 0, 255).astype(np.uint8)
        return Image.fromarray(grey, mode="L").convert("RGB")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _open(data: io.BytesIO | Path, name: str, max_image_pixels: int) -> Image.Image:
    try:
        with warnings.catch_warnings():
            # PIL only warns between 1x and 2x its limit; we refuse explicitly just below.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            image = Image.open(data)
    except FileNotFoundError:
        raise DataError("image file not found", path=name) from None
    except IsADirectoryError:
        raise DataError("image path is a directory, not a file", path=name) from None
    except PermissionError:
        raise DataError("image file is not readable (permission denied)", path=name) from None
    except Image.DecompressionBombError as exc:
        raise DataError(f"refused: decompression bomb ({exc})", path=name) from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DataError(f"cannot decode image ({exc})", path=name) from None
    width, height = image.size
    if width * height > max_image_pixels:
        raise DataError(f"refused: {width}x{height} = {width * height} pixels exceeds the "
                        f"decompression-bomb limit of {max_image_pixels} pixels", path=name)
    try:
        image.load()
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise DataError(f"cannot decode image (corrupt or truncated: {exc})", path=name) from None
    return image


def load_image(source: str | Path | Image.Image, base_dir: str | Path | None = None,
               max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS) -> Image.Image:
    """Load ``source`` (path, http(s) URL or PIL image) as an RGB PIL image."""
    if isinstance(source, Image.Image):
        width, height = source.size
        if width * height > max_image_pixels:
            raise DataError(f"refused: {width}x{height} image exceeds the decompression-bomb "
                            f"limit of {max_image_pixels} pixels")
        return to_rgb(ImageOps.exif_transpose(source) or source)
    if is_url(source):
        image = _open(io.BytesIO(_fetch_url(source)), source, max_image_pixels)
    elif isinstance(source, (str, Path)) and str(source):
        path = resolve_image(source, base_dir)
        image = _open(Path(path), path, max_image_pixels)
    else:
        raise DataError(f"image must be a path, URL or PIL image, got {type(source).__name__}")
    return to_rgb(ImageOps.exif_transpose(image) or image)


def image_size(source: str | Path | Image.Image, base_dir: str | Path | None = None) -> tuple[int, int] | None:
    """(width, height) from the header only (cheap), or None if unknown (URL / unreadable)."""
    if isinstance(source, Image.Image):
        return source.size
    if is_url(source) or not isinstance(source, (str, Path)):
        return None
    try:
        with Image.open(resolve_image(source, base_dir)) as image:
            return image.size
    except Exception:  # the real load reports the error properly; this is only a hint
        return None


def crop_to_bbox(image: Image.Image, bbox: list[float], name: str | None = None) -> Image.Image:
    """``image`` (as loaded: RGB, EXIF-upright) cropped to ``bbox = [x0, y0, x1, y1]`` pixels.

    The box is in the frame of the image *as displayed*, the frame in which an uncropped
    item reaches the model; a box reaching past the image is an error, not a silent clamp.
    """
    x0, y0, x1, y1 = bbox
    if x1 > image.width or y1 > image.height:
        where = f" {name}" if name else ""
        raise DataError(f"box {list(bbox)} lies outside the {image.width}x{image.height} image{where}",
                        field="bbox")
    return image.crop((round(x0), round(y0), round(x1), round(y1)))
