"""Item images -> decoded PIL images, before a request joins the queue.

Decoding here (in a thread off the event loop) means an undecodable image, an unreachable URL
or a refused local path fails *its own* request with a 400 naming the item, and never a
micro-batch shared with other clients.  Decoding is :func:`vis_embed.data.images.load_image`
(the project's one decoder: format checks, decompression-bomb limit, EXIF orientation, RGB).

URLs are fetched here rather than by ``load_image`` because a server needs what a batch job
does not: a short timeout (a dead host must not hold a request for ``load_image``'s 30 s)
and a cap on the bytes read (a huge download must not exhaust memory).  The fetched bytes are
then decoded by ``load_image`` as a data URI.
"""

from __future__ import annotations

import base64
import urllib.request
from typing import Any

from PIL import Image

from vis_embed.data.images import is_data_uri, is_url, load_image
from vis_embed.errors import DataError
from vis_embed.serving.errors import RequestError

DEFAULT_URL_TIMEOUT_S = 5.0
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024


def decode_images(items: list[dict[str, Any]], allow_local_files: bool,
                  url_timeout_s: float = DEFAULT_URL_TIMEOUT_S,
                  max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES, *, max_pixels: int | None = None,
                  decode: str = "exact") -> list[dict[str, Any]]:
    """``items`` with each ``image`` replaced by its decoded RGB PIL image (a 400 names a bad one).

    ``max_pixels`` / ``decode``: the model's pixel budget and decode mode (``load_image``); with
    ``"fast"`` an image above the budget is reduced while decoding, so a huge image (a 1-bit
    PNG of 80 megapixels) never waits in the queue at full RGB resolution."""
    decoded = []
    for index, item in enumerate(items):
        if "image" in item:
            param = f"input[{index}].image"
            # A bbox is in full-resolution pixels: such an item is decoded whole (as model.preparer does).
            budget = None if "bbox" in item else max_pixels
            item = {**item, "image": _decode(item["image"], param, allow_local_files, url_timeout_s,
                                             max_image_bytes, budget, decode)}
        decoded.append(item)
    return decoded


def _decode(source: str, param: str, allow_local_files: bool, url_timeout_s: float,
            max_image_bytes: int, max_pixels: int | None = None, decode: str = "exact") -> Image.Image:
    if is_url(source):
        source = _as_data_uri(_fetch(source, param, url_timeout_s, max_image_bytes))
    elif not is_data_uri(source) and not allow_local_files:
        raise RequestError(400, f"{param}: local image paths are refused by this server (start it with "
                                f"--allow-local-files); send a data: URI (base64) or an http(s) URL",
                           param=param)
    try:
        return load_image(source, max_pixels=max_pixels, decode=decode if max_pixels else "exact")
    except DataError as exc:
        raise RequestError(400, f"{param}: {exc.reason}", param=param) from None


def _fetch(url: str, param: str, timeout_s: float, max_bytes: int) -> bytes:
    request = urllib.request.Request(url, headers={"User-Agent": "vis_embed-serve"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 (http(s) only)
            data = response.read(max_bytes + 1)
    except Exception as exc:  # network errors come in many classes; all mean "cannot fetch"
        raise RequestError(400, f"{param}: cannot fetch image URL {url[:200]} ({type(exc).__name__}: "
                                f"{exc})", param=param) from None
    if len(data) > max_bytes:
        raise RequestError(413, f"{param}: image at {url[:200]} is larger than {max_bytes} bytes",
                           param=param)
    return data


def _as_data_uri(data: bytes) -> str:
    # load_image sniffs the real format from the bytes; the subtype is only for the URI's syntax.
    return "data:image/octet-stream;base64," + base64.b64encode(data).decode("ascii")
