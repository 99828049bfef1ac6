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
* fetches run in the server's own bounded pool (``--url-workers``), at most
  :data:`FETCHES_PER_REQUEST` of one request at once, each bounded by ``--url-timeout`` *and*
  by what is left of the request's deadline; a request that ends (answered, timed out, gone)
  cancels its fetches not yet started;
* every failure of a URL -- refused address, no such name, timeout, HTTP error, not an image --
  says only "cannot fetch image URL", so the server cannot be used to probe a network;
* only the formats of :data:`vis_embed.data.image_guards.INPUT_FORMATS` are opened (no
  PostScript to Ghostscript, no ICO/ICNS decoding embedded PNGs while reading a header);
* the pixels of one request are bounded (``--max-request-pixels``) and so are the pixels of
  all requests in flight (``--max-pixels-in-flight``, :mod:`vis_embed.serving.budget`), both
  read from each image's header before any image is decoded;
* decoding runs in its own pool of ``--decode-workers`` threads (never the event loop's
  default pool, where text-only requests are prepared), each image within ``--decode-timeout``
  seconds (the decode is stopped between two blocks of input: ``DeadlineBytes``).

A clip (``{"video": [frame, ...]}``) is its frames, each one an image to all of the above: only
the frames the model will see (``data/video.frame_indices``, the preparer's own pick) are read,
counted in the pixel budgets from their headers and decoded (to the per-frame budget
``video_max_pixels``); the item then holds the decoded frames at their places in the list,
so the preparer picks exactly those and decodes nothing more.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import time
from collections.abc import Awaitable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from typing import Any

from vis_embed.data.fetch import FETCH_FAILED, FetchError, UrlPolicy, fetch_url
from vis_embed.data.image_geometry import bbox_outside
from vis_embed.data.image_guards import DeadlineBytes, open_image
from vis_embed.data.video import TEMPORAL_PATCH, frame_indices
from vis_embed.data.images import (
    TargetSize,
    image_size,
    is_data_uri,
    is_url,
    item_decode_mode,
    load_image,
)
from vis_embed.errors import DataError
from vis_embed.serving.budget import Reservation
from vis_embed.serving.errors import RequestError
from vis_embed.serving.settings import ServerSettings

FETCHES_PER_REQUEST = 4


@dataclass
class ImagePolicy:
    """What a request's images may be and cost (built once by ``create_app``): the server's
    settings, whole (what may be read, fetch and decode timeouts, image and request sizes,
    a request's fetched bytes bounded by its body limit; bounds checked where they were built),
    its pools, and the model's own pixel budget and decode mode."""

    settings: ServerSettings = field(default_factory=lambda: ServerSettings(model_name=""))  # library use
    url_pool: Executor | None = None  # None: fetched in the caller's thread
    decode_pool: Executor | None = None  # None: the event loop's default pool (library use only)
    # The model's pixel budget and decode mode (load_image): with "fast" an image above the budget
    # is reduced while decoding, so a huge image (a 1-bit PNG of 80 megapixels) never waits in the
    # queue at full RGB resolution.
    max_pixels: int | None = None
    decode: str = "exact"
    target_size: TargetSize | None = None  # the processor's size rule (Preparer.target_size)
    # Clips: frames picked as the preparer picks them, decoded to the per-frame budget.
    video_frames: int = 8
    temporal_patch: int = TEMPORAL_PATCH
    video_max_pixels: int | None = None
    video_target_size: TargetSize | None = None

    def url_policy(self, deadline: float | None = None) -> UrlPolicy:
        """The fetch policy; a fetch ends by ``deadline`` (``time.monotonic()``) at the latest."""
        settings = self.settings
        timeout = settings.url_timeout_s if deadline is None else min(settings.url_timeout_s,
                                                                      deadline - time.monotonic())
        return UrlPolicy(allow_private=settings.allow_private_urls, timeout_s=timeout,
                         max_bytes=settings.max_image_bytes)


@dataclass(frozen=True)
class _Visual:
    """One image to read: an item's ``image``, or one picked frame of its ``video`` list."""

    index: int  # the item's position in the request
    frame: int | None = None  # the frame's position in the item's list; None for an image

    @property
    def param(self) -> str:
        return f"input[{self.index}].image" if self.frame is None else f"input[{self.index}].video[{self.frame}]"

    def source(self, items: Sequence[dict[str, Any]]) -> str:
        item = items[self.index]
        return item["image"] if self.frame is None else item["video"][self.frame]


async def decode_request_images(items: list[dict[str, Any]], policy: ImagePolicy, reservation: Reservation,
                                deadline: float) -> list[dict[str, Any]]:
    """A request's images decoded: each ``image`` replaced by its decoded RGB PIL image, each
    clip's picked frames by theirs (a 4xx names a bad one); sources read (URLs fetched, at most
    :data:`FETCHES_PER_REQUEST` at once) and images decoded in the server's pools, the
    request's pixels reserved in the global budget (``reservation``) before any is decoded.
    Cancelling the caller cancels the fetches and decodes not yet started."""
    loop = asyncio.get_running_loop()
    positions = _image_positions(items, policy)
    fetch_gate, fetched = asyncio.Semaphore(FETCHES_PER_REQUEST), [0]

    async def source(visual: _Visual) -> bytes | str:
        image, param = visual.source(items), visual.param
        if not is_url(image):
            return await loop.run_in_executor(policy.decode_pool, _image_source, image, param, policy)
        if not policy.settings.allow_urls:
            return _image_source(image, param, policy)  # the refusal, without a thread
        # The fetch's whole life -- its waits for the request's fetch slots and for a worker of the
        # shared pool included -- fits --url-timeout: its deadline is set when it is asked for.
        fetch_deadline = min(deadline, time.monotonic() + policy.settings.url_timeout_s)
        async with fetch_gate:
            data = await loop.run_in_executor(policy.url_pool, _fetch, image, param, policy, fetch_deadline)
        fetched[0] += len(data)  # fetched bytes are held until decoded: bounded like a body
        limit = policy.settings.max_request_bytes
        if fetched[0] > limit:
            raise RequestError(413, f"{param}: the request's image URLs hold more than {limit} "
                                    f"bytes in all (--max-request-bytes); send fewer images", param=param)
        return data

    sources = await _in_order([source(visual) for visual in positions])
    pixels = await loop.run_in_executor(policy.decode_pool, _request_pixels, sources, positions, policy)
    await reservation.acquire(pixels)
    images = await _in_order([loop.run_in_executor(policy.decode_pool, _decode, items, visual, source, policy)
                              for visual, source in zip(positions, sources)])
    return _with_images(items, positions, images)


async def _in_order(steps: Sequence[Awaitable[Any]]) -> list[Any]:
    """The results of ``steps`` (run together); the error of the first failing one in order."""
    results = await asyncio.gather(*steps, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


def _image_positions(items: Sequence[dict[str, Any]], policy: ImagePolicy) -> list[_Visual]:
    """Every image to read: each item's image, and each clip's frames the model will see."""
    positions: list[_Visual] = []
    for index, item in enumerate(items):
        if "image" in item:
            positions.append(_Visual(index))
        elif "video" in item:
            picked = sorted(set(frame_indices(len(item["video"]), policy.video_frames, policy.temporal_patch)))
            positions.extend(_Visual(index, frame) for frame in picked)
    return positions


def _with_images(items: list[dict[str, Any]], positions: list[_Visual], images: list[Any]) -> list[dict[str, Any]]:
    decoded = list(items)
    for visual, image in zip(positions, images):
        item = decoded[visual.index]
        if visual.frame is None:
            decoded[visual.index] = {**item, "image": image}
        else:  # the decoded frame at its place; the frames left out stay sources, never read
            frames = list(item["video"])
            frames[visual.frame] = image
            decoded[visual.index] = {**item, "video": frames}
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
    if not policy.settings.allow_local_files:
        raise RequestError(400, f"{param}: local image paths are refused by this server (start it with "
                                f"--allow-local-files); send a data: URI (base64) or an http(s) URL",
                           param=param)
    return source


def _request_pixels(sources: Sequence[bytes | str], positions: Sequence[_Visual], policy: ImagePolicy) -> int:
    """The request's pixels from its images' headers; 413 above ``--max-request-pixels``."""
    return _check_request_pixels([_header_pixels(source) for source in sources], positions, policy)


def _check_request_pixels(pixels: Sequence[int], positions: Sequence[_Visual], policy: ImagePolicy) -> int:
    # Checked on the headers' sizes, before any pixel is decoded: a 14 KB 1-bit PNG can decode
    # to 265 MB of RGB.  Every picked frame of a clip counts.
    total, limit = 0, policy.settings.max_request_pixels
    for count, visual in zip(pixels, positions):
        total += count
        if total > limit:
            param = visual.param
            raise RequestError(413, f"{param}: the request's images hold more than {limit} "
                                    f"pixels in all (--max-request-pixels); send fewer or smaller images",
                               param=param)
    return total


def _header_pixels(source: bytes | str) -> int:
    """Width x height from the image's header alone (0 if unreadable: the decode reports it)."""
    size = None
    if isinstance(source, bytes):
        try:
            with open_image(DeadlineBytes(source, None)) as image:
                size = image.size
        except Exception:  # noqa: BLE001  (not an image, a bomb: load_image says which, in its words)
            size = None
    else:
        size = image_size(source)
    return 0 if size is None else size[0] * size[1]


def _decode(items: Sequence[dict[str, Any]], visual: _Visual, source: bytes | str, policy: ImagePolicy) -> Any:
    """The item's image (or clip frame) decoded (RGB), a bbox checked against it; a 400 naming it otherwise."""
    item, param, frame = items[visual.index], visual.param, visual.frame is not None
    try:
        image = load_image(source, max_pixels=policy.video_max_pixels if frame else policy.max_pixels,
                           decode=item_decode_mode(item, policy.decode),
                           target_size=policy.video_target_size if frame else policy.target_size,
                           max_decode_s=policy.settings.decode_timeout_s)
    except DataError as exc:
        if is_url(visual.source(items)):  # fetched, but not an image: said as a failed fetch is
            raise RequestError(400, f"{param}: {FETCH_FAILED}", param=param) from None
        raise RequestError(400, f"{param}: {exc.reason}", param=param) from None
    except Exception as exc:  # noqa: BLE001  (whatever hostile bytes make PIL raise: the client's 400)
        raise RequestError(400, f"{param}: cannot decode image ({type(exc).__name__})", param=param) from None
    _check_box(item, image, visual.index)
    return image


def _fetch(url: str, param: str, policy: ImagePolicy, deadline: float | None = None) -> bytes:
    if not policy.settings.allow_urls:
        raise RequestError(400, f"{param}: image URLs are not fetched by this server (its operator can "
                                f"start it with --allow-urls); send the image as a data: URI (base64)",
                           param=param)
    try:
        url_policy = policy.url_policy(deadline)
        if url_policy.timeout_s <= 0:
            raise FetchError(FETCH_FAILED)
        return fetch_url(url, url_policy)
    except FetchError:
        # One text for every refused or failed URL: which one it was would map the network.
        raise RequestError(400, f"{param}: {FETCH_FAILED}", param=param) from None


def _check_box(item: dict[str, Any], image: Any, index: int) -> None:
    """A bbox outside the decoded image fails here, alone, not in the shared batch."""
    box = item.get("bbox")
    if box is not None and (problem := bbox_outside(box, image.width, image.height)) is not None:
        param = f"input[{index}].bbox"
        raise RequestError(400, f"{param}: {problem}", param=param)
