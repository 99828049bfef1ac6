"""Item images -> decoded PIL images, before a request joins the queue.

Decoding here (in a thread off the event loop) means an undecodable image, a refused URL or
a refused local path fails *its own* request with a 4xx naming the item, and never a
micro-batch shared with other clients.  Decoding is :func:`vis_embed.data.images.load_image`
(the project's one decoder: format checks, decompression-bomb limit, EXIF orientation, RGB)
and URLs go through the project's one fetcher, :func:`vis_embed.data.fetch.fetch_url`, under
the server's policy (:class:`ImagePolicy`):

* URLs are refused unless ``--allow-urls``; even then loopback, private, link-local and
  multicast addresses are refused unless ``--allow-private-urls`` (checked on every address
  and redirect hop by the fetcher);
* fetches run in the server's own bounded pool (``--url-workers``), so slow URLs cannot take
  the threads other requests decode in, and ``--url-timeout`` bounds each whole fetch;
* every failure of a URL says only "cannot fetch image URL" (plus the HTTP status class), so
  the server cannot be used to probe a network;
* the pixels of one request are bounded (``--max-request-pixels``), read from each image's
  header before it is decoded: a few small files that would decode to huge images are refused
  without allocating them.
"""

from __future__ import annotations

import base64
import binascii
import io
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any

from PIL import Image

from vis_embed.data.fetch import FETCH_FAILED, FetchError, UrlPolicy, fetch_url
from vis_embed.data.images import (
    TargetSize,
    bbox_outside,
    image_size,
    is_data_uri,
    is_url,
    item_decode_mode,
    load_image,
)
from vis_embed.errors import DataError
from vis_embed.serving.errors import RequestError

DEFAULT_URL_TIMEOUT_S = 5.0
DEFAULT_MAX_IMAGE_BYTES = 20 * 1024 * 1024
DEFAULT_URL_WORKERS = 4
DEFAULT_MAX_REQUEST_PIXELS = 64_000_000  # five 12 MP photos, or ~300 of 448 x 448; RGB: 192 MB


@dataclass
class ImagePolicy:
    """What a request's images may be and cost (built once by ``create_app``)."""

    allow_local_files: bool = False
    allow_urls: bool = False
    allow_private_urls: bool = False
    url_timeout_s: float = DEFAULT_URL_TIMEOUT_S
    max_image_bytes: int = DEFAULT_MAX_IMAGE_BYTES
    max_request_pixels: int = DEFAULT_MAX_REQUEST_PIXELS
    url_pool: ThreadPoolExecutor | None = None  # None: fetched in the caller's thread
    # The model's pixel budget and decode mode (load_image): with "fast" an image above the budget
    # is reduced while decoding, so a huge image (a 1-bit PNG of 80 megapixels) never waits in the
    # queue at full RGB resolution.
    max_pixels: int | None = None
    decode: str = "exact"
    target_size: TargetSize | None = None  # the processor's size rule (Preparer.target_size)

    def url_policy(self) -> UrlPolicy:
        return UrlPolicy(allow_private=self.allow_private_urls, timeout_s=self.url_timeout_s,
                         max_bytes=self.max_image_bytes)


def decode_images(items: list[dict[str, Any]], policy: ImagePolicy) -> list[dict[str, Any]]:
    """``items`` with each ``image`` replaced by its decoded RGB PIL image (a 4xx names a bad one)."""
    decoded, pixels = [], 0
    for index, item in enumerate(items):
        if "image" in item:
            param = f"input[{index}].image"
            source = _image_source(item["image"], param, policy)
            # The budget is checked on the header's size, before the pixels are decoded: a
            # 14 KB 1-bit PNG can decode to 265 MB of RGB.
            pixels += _header_pixels(source, param)
            if pixels > policy.max_request_pixels:
                raise RequestError(413, f"{param}: the request's images hold more than {policy.max_request_pixels} "
                                        f"pixels in all (--max-request-pixels); send fewer or smaller images",
                                   param=param)
            image = _load(source, param, is_url(item["image"]), policy.max_pixels,
                          item_decode_mode(item, policy.decode), policy.target_size)
            _check_box(item, image, index)
            item = {**item, "image": image}
        decoded.append(item)
    return decoded


def _image_source(source: str, param: str, policy: ImagePolicy) -> bytes | str:
    """The image's encoded bytes (data URI, URL) or its local path, after the server's policy."""
    if is_url(source):
        return _fetch(source, param, policy)
    if is_data_uri(source):
        try:
            return base64.b64decode(source.split(",", 1)[1], validate=True)
        except (binascii.Error, ValueError) as exc:
            raise RequestError(400, f"{param}: malformed base64 image data URI ({exc})", param=param) from None
    if not policy.allow_local_files:
        raise RequestError(400, f"{param}: local image paths are refused by this server (start it with "
                                f"--allow-local-files); send a data: URI (base64) or an http(s) URL",
                           param=param)
    return source


def _header_pixels(source: bytes | str, param: str) -> int:
    """Width x height from the image's header alone (0 if unreadable: the decode reports it)."""
    size = None
    if isinstance(source, bytes):
        try:
            with Image.open(io.BytesIO(source)) as image:
                size = image.size
        except Exception:  # noqa: BLE001  (not an image, a bomb: load_image says which, in its words)
            size = None
    else:
        size = image_size(source)
    return 0 if size is None else size[0] * size[1]


def _load(source: bytes | str, param: str, from_url: bool, max_pixels: int | None = None,
          decode: str = "exact", target_size: TargetSize | None = None) -> Image.Image:
    try:
        return load_image(source, max_pixels=max_pixels, decode=decode, target_size=target_size)
    except DataError as exc:
        if from_url:  # fetched, but not an image: said as vaguely as a failed fetch
            raise RequestError(400, f"{param}: {FETCH_FAILED} (not a usable image)", param=param) from None
        raise RequestError(400, f"{param}: {exc.reason}", param=param) from None


def _fetch(url: str, param: str, policy: ImagePolicy) -> bytes:
    if not policy.allow_urls:
        raise RequestError(400, f"{param}: image URLs are not fetched by this server (its operator can "
                                f"start it with --allow-urls); send the image as a data: URI (base64)",
                           param=param)
    try:
        if policy.url_pool is None:
            return fetch_url(url, policy.url_policy())
        future = policy.url_pool.submit(fetch_url, url, policy.url_policy())
        try:
            return future.result(timeout=policy.url_timeout_s)  # waiting for a free worker counts too
        except FutureTimeout:
            future.cancel()
            raise FetchError(FETCH_FAILED) from None
    except FetchError as exc:
        raise RequestError(400, f"{param}: {exc.reason}", param=param) from None


def _check_box(item: dict[str, Any], image: Image.Image, index: int) -> None:
    """A bbox outside the decoded image fails here, alone, not in the shared batch."""
    box = item.get("bbox")
    if box is not None and (problem := bbox_outside(box, image.width, image.height)) is not None:
        param = f"input[{index}].bbox"
        raise RequestError(400, f"{param}: {problem}", param=param)
