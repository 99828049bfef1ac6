"""Loading images from paths, URLs or PIL objects into RGB, with errors a user can act on.

* Any PIL mode becomes RGB: transparency (RGBA, LA, P with a transparent index) is composited
  on white rather than dropped to black; 16-bit and 32-bit greyscale (I;16, I, F) are scaled
  to 8 bits instead of being clipped to white; CMYK/YCbCr/L go through PIL's converters.
* EXIF orientation is applied so phone photos are upright.
* Decompression bombs (more than ``max_image_pixels`` pixels, default PIL's limit of about
  89 megapixels) are refused from the header alone, before any pixel is decoded.
* A missing, unreadable or corrupt file raises :class:`DataError` naming the file; so does an
  image without pixels (0 x 0, or one side 0).
* An extreme aspect ratio (4000 x 2) is padded, not refused, by the preparer
  (:mod:`vis_embed.data.image_geometry`, with bounding boxes).

* Besides paths and http(s) URLs, a source may be a ``file://`` URI or a base64 data URI
  (``data:image/png;base64,...``): the forms Qwen's own tooling (qwen-vl-utils, vLLM) accepts,
  or the encoded bytes themselves.  URLs are fetched by :mod:`vis_embed.data.fetch` (the one
  fetcher: http(s) only, whole-fetch deadline, byte cap, address policy).
* A path that is not a regular file (a FIFO, a device) is refused before it is opened:
  reading a FIFO would block forever.
* Only the formats of :data:`vis_embed.data.image_guards.INPUT_FORMATS` are opened (no EPS to
  Ghostscript, no ICO/ICNS decoding embedded PNGs); a progressive JPEG of absurdly many scans
  is refused from its bytes; error texts carry no heap address or path (image_guards).

Resizing to the model's pixel budget (min/max pixels) is the processor's job, not ours:
qwen-vl-utils' ``fetch_image`` resizes with PIL, which is not pixel-identical to the
transformers processor's resize (measured: up to 0.27 in normalised units), so images are
handed to the processor as loaded.  The token count of an image before decoding it is the
processor's own rule (:mod:`vis_embed.model.inputs.lengths`).

* ``decode="fast"`` (``--decode fast``) with the model's ``max_pixels``: an image larger than
  the budget is decoded at a reduced scale -- JPEG draft mode, else PIL's box ``reduce`` before
  the RGB conversion -- never below :data:`FAST_DECODE_MARGIN` (2) x the size the processor
  resizes it to, per side (the processor's own size rule when the caller passes it as
  ``target_size``, else an upper bound from ``max_pixels``); the processor's final resize is
  unchanged.  Decoding a 12 MP photo whole to feed a ~450x450 grid was the whole cost of
  preparing it.  The default, ``"exact"``, decodes every pixel.  An item with a
  bbox is always decoded whole (:func:`item_decode_mode`).
"""

from __future__ import annotations

import base64
import binascii
import io
import math
import os
import re
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vis_embed.data.fetch import UrlPolicy, fetch_url
from vis_embed.data.image_guards import (
    DECODE_BLOCK,
    INPUT_FORMATS,
    DeadlineBytes,
    DecodeTimeout,
    check_jpeg_scans,
    open_image,
    safe_reason,
)
from vis_embed.data.image_geometry import check_has_pixels
from vis_embed.errors import DataError
from vis_embed.io import check_regular_file as io_check_regular_file

DEFAULT_MAX_IMAGE_PIXELS = int(Image.MAX_IMAGE_PIXELS or 89_478_485)
URL_PREFIXES = ("http://", "https://")
FILE_URI_PREFIX = "file://"
DATA_URI = re.compile(r"^data:image/[\w.+-]+;base64,", re.IGNORECASE)
# How images larger than the model's pixel budget are decoded: "exact" decodes every pixel and
# leaves the whole downscale to the processor; "fast" decodes at a reduced scale (JPEG draft
# mode, else PIL's box ``reduce``) to no less than FAST_DECODE_MARGIN x the size the processor
# resizes to (per side), and the processor does its usual final resize from there.
DECODE_MODES = ("exact", "fast")
Decode = Literal["exact", "fast"]
FAST_DECODE_MARGIN = 2
# Modes PIL's reduce() refuses: "1" is widened to "L" first (1 byte a pixel, not 3); the
# palette and 16-bit modes go through to_rgb first.
_REDUCE_VIA_L = ("1",)
_REDUCE_AFTER_RGB = ("P", "PA", "I;16", "I;16B", "I;16L", "I;16N")
_GREY_BAND_PIXELS = 1 << 20  # 16/32-bit greyscale is scaled to 8 bits this many pixels at a time
# (width, height) -> the (width, height) the model's processor resizes such an image to
TargetSize = Callable[[int, int], tuple[int, int]]


class _FastBudget(NamedTuple):
    """What a fast decode may reduce an image to (:func:`fast_decode_floor`)."""

    max_pixels: int
    target_size: TargetSize | None


def item_decode_mode(item: Mapping[str, Any], decode: Decode) -> Decode:
    """How to decode an item's image: ``decode``, but "exact" for an item with a bbox (its box
    is in full-resolution pixels, and the pixel budget applies to the crop, not the image)."""
    return "exact" if "bbox" in item else decode


def is_url(source: Any) -> bool:
    """True for an http(s) URL string (fetched, never resolved against a folder)."""
    return isinstance(source, str) and source.startswith(URL_PREFIXES)


def is_data_uri(source: Any) -> bool:
    """True for a base64 image data URI (``data:image/jpeg;base64,...``)."""
    return isinstance(source, str) and bool(DATA_URI.match(source))


def resolve_image(source: str | Path, base_dir: str | Path | None = None) -> str:
    """The image's location as a string: a URL or data URI unchanged; a path (or ``file://``
    URI) with ``~`` expanded, made relative to ``base_dir`` unless absolute (no ``base_dir``:
    the working directory), normalised."""
    if is_url(source) or is_data_uri(source):
        return str(source)
    path = str(source)
    path = os.path.expanduser(path[len(FILE_URI_PREFIX):] if path.startswith(FILE_URI_PREFIX) else path)
    if base_dir is not None:
        path = os.path.join(base_dir, path)  # an absolute ``path`` wins: join drops base_dir
    return os.path.normpath(path)


def to_rgb(image: Image.Image) -> Image.Image:
    """Convert any PIL mode to RGB (see module docstring for the choices made)."""
    if image.mode == "RGB":
        return image
    if image.mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        return _scaled_grey(image).convert("RGB")
    if image.mode == "P" and "transparency" in image.info:
        image = image.convert("RGBA")
    if image.mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image.convert("RGB")


def _scaled_grey(image: Image.Image) -> Image.Image:
    """A 16/32-bit greyscale image scaled to 8 bits ("L"), in bands of :data:`_GREY_BAND_PIXELS`:
    the float64 temporaries of one band, not of the whole image (a 10 KB 8000 x 8000 16-bit PNG
    would otherwise cost 1.5 GB of them)."""
    peak = 65535.0 if image.mode.startswith("I;16") else max(float(image.getextrema()[1]), 255.0)
    width, height = image.size
    grey = np.empty((height, width), dtype=np.uint8)
    rows = max(1, _GREY_BAND_PIXELS // width)
    for top in range(0, height, rows):
        band = np.asarray(image.crop((0, top, width, min(height, top + rows))), dtype=np.float64)
        grey[top:top + band.shape[0]] = np.clip(np.round(band * (255.0 / peak)), 0, 255)
    return Image.fromarray(grey, mode="L")


def check_regular_file(path: str | Path, name: str | None = None) -> None:
    """io.check_regular_file for an image (a FIFO or a device refused before any ``open``)."""
    io_check_regular_file(path, "image", name)


def _open(data: io.BytesIO | Path, name: str, max_image_pixels: int,
          budget: _FastBudget | None = None) -> Image.Image:
    """Open (an allowed format only: image_guards), check the header (pixels, bomb limit, JPEG
    scans) and decode; with a ``budget`` (fast decode) a JPEG is decoded in draft mode at the
    smallest DCT scale that keeps the decode floor.  A :class:`DeadlineBytes` source stops the
    decode once its deadline passed."""
    if isinstance(data, Path):
        check_regular_file(data, name)
    try:
        image = open_image(data)
    except FileNotFoundError:
        raise DataError("image file not found", path=name) from None
    except IsADirectoryError:
        raise DataError("image path is a directory, not a file", path=name) from None
    except PermissionError:
        raise DataError("image file is not readable (permission denied)", path=name) from None
    except Image.DecompressionBombError as exc:
        raise DataError(f"refused: decompression bomb ({safe_reason(exc)})", path=name) from None
    except UnidentifiedImageError:
        raise DataError(f"cannot decode image (not an image, or not one of {', '.join(INPUT_FORMATS)})",
                        path=name) from None
    except DecodeTimeout:
        raise DataError("refused: the image took too long to read", path=name) from None
    except Exception as exc:  # noqa: BLE001  (a plugin's parser can raise anything on hostile bytes)
        raise DataError(f"cannot decode image ({safe_reason(exc)})", path=name) from None
    width, height = image.size
    check_has_pixels(image, name)
    if width * height > max_image_pixels:
        raise DataError(f"refused: {width}x{height} = {width * height} pixels exceeds the "
                        f"decompression-bomb limit of {max_image_pixels} pixels", path=name)
    floor = None if budget is None else fast_decode_floor(width, height, *budget)
    if floor is not None and image.format == "JPEG":
        image.draft(None, floor)  # libjpeg scales by 1/2, 1/4 or 1/8 while decoding, never below floor
    if isinstance(data, DeadlineBytes):
        image.decodermaxblock = DECODE_BLOCK  # the deadline is checked between blocks: keep them short
    try:
        check_jpeg_scans(image)
        image.load()
    except DecodeTimeout:
        raise DataError("refused: decoding the image took too long", path=name) from None
    except Exception as exc:  # noqa: BLE001  (corrupt, truncated, hostile: a DataError, never a crash)
        raise DataError(f"cannot decode image (corrupt or truncated: {safe_reason(exc)})", path=name) from None
    return image


def load_image(source: str | Path | bytes | Image.Image, base_dir: str | Path | None = None,
               max_image_pixels: int = DEFAULT_MAX_IMAGE_PIXELS, url_policy: UrlPolicy | None = None, *,
               max_pixels: int | None = None, decode: Decode = "exact",
               target_size: TargetSize | None = None, max_decode_s: float | None = None) -> Image.Image:
    """Load ``source`` (path, http(s) URL, data URI, encoded image ``bytes`` or PIL image) as an
    RGB PIL image.  URLs go through :func:`vis_embed.data.fetch.fetch_url` under ``url_policy``
    (default: :class:`~vis_embed.data.fetch.UrlPolicy`, a batch job's).  Only the formats of
    :data:`~vis_embed.data.image_guards.INPUT_FORMATS` are opened; ``max_decode_s`` bounds the
    decode of encoded bytes (a URL's, a data URI's) in seconds (DataError beyond).

    ``decode="fast"`` with the model's pixel budget ``max_pixels``: an image larger than the
    budget is decoded at a reduced scale, never below :data:`FAST_DECODE_MARGIN` x the size the
    processor resizes it to (:func:`fast_decode_floor`; ``target_size`` is the processor's size rule,
    when the caller knows the model); ``"exact"`` (the default) decodes it whole.
    """
    # ``decode`` comes from a validated EmbeddingConfig (its one check of the mode names)
    budget = _FastBudget(max_pixels, target_size) if decode == "fast" and max_pixels else None
    if isinstance(source, Image.Image):
        width, height = source.size
        check_has_pixels(source)
        if width * height > max_image_pixels:
            raise DataError(f"refused: {width}x{height} image exceeds the decompression-bomb "
                            f"limit of {max_image_pixels} pixels")
        return _reduced_rgb(ImageOps.exif_transpose(source) or source, budget)
    deadline = None if max_decode_s is None else time.monotonic() + max_decode_s
    if isinstance(source, (bytes, bytearray, memoryview)):
        image = _open(DeadlineBytes(bytes(source), deadline), "image bytes", max_image_pixels, budget)
    elif is_url(source):
        image = _open(DeadlineBytes(fetch_url(source, url_policy or UrlPolicy()), deadline), source,
                      max_image_pixels, budget)
    elif is_data_uri(source):
        image = _open(DeadlineBytes(_decode_data_uri(source), deadline), f"{source[:40]}...", max_image_pixels,
                      budget)
    elif isinstance(source, (str, Path)) and str(source):
        path = resolve_image(source, base_dir)
        image = _open(Path(path), path, max_image_pixels, budget)
    else:
        raise DataError(f"image must be a path, URL or PIL image, got {type(source).__name__}")
    ImageOps.exif_transpose(image, in_place=True)  # our own decoded image: no copy needed
    return _reduced_rgb(image, budget)


def fast_decode_floor(width: int, height: int, max_pixels: int | None,
                      target_size: TargetSize | None = None) -> tuple[int, int] | None:
    """The smallest (width, height) a fast decode may reduce an image to: FAST_DECODE_MARGIN x
    the size the processor resizes it to (per side), or None when not even a halving stays above.

    ``target_size`` is that size, by the processor's own rule (the model passes it:
    :meth:`vis_embed.model.inputs.preparer.Preparer.target_size`).  Without it, an upper bound: the
    processor keeps the area within ``max_pixels`` (its sides rounded down to the patch grid),
    so ``sqrt(max_pixels / area)`` bounds its scale from above.  The bound is up to one grid
    step per side larger, which kept 4032x3024 photos at JPEG 1/2 where 1/4 is 2x the real
    504x364."""
    if max_pixels is None or width * height <= max_pixels:
        return None
    if target_size is None:
        scale = FAST_DECODE_MARGIN * math.sqrt(max_pixels / (width * height))
        floor = max(1, math.ceil(width * scale)), max(1, math.ceil(height * scale))
    else:
        try:
            target_width, target_height = target_size(width, height)
        except ValueError:  # the processor refuses this shape; it says so when it sees the image
            return None
        floor = FAST_DECODE_MARGIN * target_width, FAST_DECODE_MARGIN * target_height
    if 2 * floor[0] > width or 2 * floor[1] > height:  # not even a halving fits: decode whole
        return None
    return floor


def _reduced_rgb(image: Image.Image, budget: _FastBudget | None) -> Image.Image:
    """``to_rgb(image)``, box-reduced first by the largest integer factor that keeps
    :func:`fast_decode_floor` (none without a budget), so a huge image never exists as full RGB."""
    floor = None if budget is None else fast_decode_floor(*image.size, *budget)
    factor = 1 if floor is None else min(image.width // floor[0], image.height // floor[1])
    if factor < 2:
        return to_rgb(image)
    if image.mode in _REDUCE_AFTER_RGB:
        return to_rgb(image).reduce(factor)
    if image.mode in _REDUCE_VIA_L:
        image = image.convert("L")
    return to_rgb(image.reduce(factor))


def _decode_data_uri(uri: str) -> bytes:
    try:
        return base64.b64decode(uri.split(",", 1)[1], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise DataError(f"malformed base64 image data URI ({exc})", path=f"{uri[:40]}...") from None


def image_size(source: str | Path | Image.Image, base_dir: str | Path | None = None) -> tuple[int, int] | None:
    """(width, height) from the header only (cheap), or None if unknown (URL / unreadable)."""
    if isinstance(source, Image.Image):
        return source.size
    if is_url(source) or is_data_uri(source) or not isinstance(source, (str, Path)):
        return None
    try:
        path = resolve_image(source, base_dir)
        check_regular_file(path)  # a FIFO would block this header read forever
        with open_image(path) as image:
            return image.size
    except Exception:  # the real load reports the error properly; this is only a hint
        return None


# EXIF orientations that turn the stored image by 90 degrees (the displayed frame is transposed)
_TRANSPOSING_ORIENTATIONS = frozenset({5, 6, 7, 8})


def displayed_size(path: str | Path) -> tuple[int, int]:
    """(width, height) of a local image file *as displayed* (after EXIF orientation, the frame
    ``load_image`` gives and a ``bbox`` is written in), read from the header without decoding
    pixels.  ``DataError`` naming the file when it cannot be read."""
    check_regular_file(path)  # a FIFO would block this header read forever
    try:
        with open_image(path) as image:
            width, height = image.size
            orientation = image.getexif().get(0x0112)  # the EXIF Orientation tag
    except Image.DecompressionBombError as exc:  # a header claiming 100000 x 100000: not an OSError
        raise DataError(f"refused: decompression bomb ({safe_reason(exc)})", path=path) from None
    except Exception as exc:  # noqa: BLE001  (a plugin's parser can raise anything on hostile bytes)
        raise DataError(f"cannot read the image header ({safe_reason(exc)})", path=path) from None
    return (height, width) if orientation in _TRANSPOSING_ORIENTATIONS else (width, height)
