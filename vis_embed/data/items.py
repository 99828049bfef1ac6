"""The item contract: what one thing to embed looks like, on every path.

An item is a mapping with the keys

* ``image``: a path (relative to the data file's folder or ``image_root``, or absolute), an
  http(s) URL, or -- in the Python API -- an ``os.PathLike`` or a PIL image;
* ``text``: a string;
* ``bbox`` (optional): ``[x0, y0, x1, y1]`` in pixels of the image *as displayed* (after EXIF
  orientation); the image is cropped to it before the model sees it;
* ``video``: a folder of frame images, a list of frame paths, or a video file, relative paths
  resolved like an image's (:mod:`vis_embed.data.video`: which frames the model sees).

An item needs an image, a video or a non-blank text (an image and a video together are
refused: one visual input per item, as the prompt has one placeholder); ``null`` means
"absent".  Any other key is an error naming it: a typo such as ``"img"`` would otherwise
turn an image item into a silent text-only (or empty) one.  :func:`check_item` is the one
validator, used by the training data config (pairs rows), the benchmark manifest's rows,
``vis-embed encode`` and ``Embedder.encode`` / ``EmbeddingModel`` -- so one item gets one
decision everywhere.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from vis_embed.data.images import is_data_uri, is_url, resolve_image
from vis_embed.data.video import check_video_value, frame_files, resolve_video
from vis_embed.errors import DataError

Item = dict[str, Any]
ITEM_KEYS: tuple[str, ...] = ("image", "text", "bbox", "video")


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _is_image_value(value: Any) -> bool:
    """A path string, an ``os.PathLike`` or a PIL image (anything with ``convert``)."""
    return isinstance(value, (str, os.PathLike)) or hasattr(value, "convert")


NOT_UNICODE = "is not valid Unicode (it holds a lone surrogate such as \\ud800)"


def is_encodable(text: str) -> bool:
    """False for a string with a lone surrogate (JSON's "\\ud800"): no tokenizer or file system takes it."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def decoded_items(items: Any) -> int:
    """How many of ``items`` (dicts) have an image or a video to decode: what sizes the worker
    pool (``--workers auto``: none for a few such items)."""
    return sum(1 for item in items if isinstance(item, dict)
               and (item.get("image") is not None or item.get("video") is not None))


def check_bbox(value: Any, field: str = "bbox", *, path: str | Path | None = None,
               line: int | None = None) -> list[float]:
    """``[x0, y0, x1, y1]`` in pixels of the displayed image, ``0 <= x0 < x1`` and ``0 <= y0 < y1``."""
    if (not isinstance(value, (list, tuple)) or len(value) != 4
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise DataError(f"expected [x0, y0, x1, y1] (4 numbers), got {value!r:.80}",
                        path=path, line=line, field=field)
    if any(isinstance(v, float) and not math.isfinite(v) for v in value):  # JSON readers accept Infinity, NaN
        raise DataError(f"box {list(value)} has a non-finite coordinate", path=path, line=line, field=field)
    x0, y0, x1, y1 = value
    if not (0 <= x0 < x1 and 0 <= y0 < y1):
        raise DataError(f"empty or negative box {list(value)}: need 0 <= x0 < x1 and 0 <= y0 < y1",
                        path=path, line=line, field=field)
    return list(value)


def check_item(value: Any, field: str | None = None, *, path: str | Path | None = None,
               line: int | None = None) -> Item:
    """Validate one item; return it with absent (``None``) keys dropped.

    Errors are ``DataError``s naming ``path``/``line`` when given and the field, dotted
    under ``field`` (``positive.img``, ``candidates[3].text``; without ``field``: ``img``).
    """
    def where(key: str | None) -> str | None:
        if key is None:
            return field
        return key if field is None else f"{field}.{key}"

    def fail(key: str | None, message: str) -> DataError:
        return DataError(message, path=path, line=line, field=where(key))

    if not isinstance(value, dict):
        raise fail(None, f"an item must be an object with 'image' and/or 'text', got {_type_name(value)}")
    unknown = [key for key in value if key not in ITEM_KEYS]
    if unknown:
        raise fail(str(unknown[0]), f"unknown item key {unknown[0]!r} (items have {', '.join(ITEM_KEYS)})")
    item = {key: value[key] for key in ITEM_KEYS if value.get(key) is not None}
    image, text = item.get("image"), item.get("text")
    if image is not None and not _is_image_value(image):
        raise fail("image", f"must be a path, URL or PIL image, got {_type_name(image)} ({image!r:.60})")
    if isinstance(image, str) and not image.strip():
        raise fail("image", "must not be empty (leave 'image' out, or null, for a text-only item)")
    if text is not None and not isinstance(text, str):
        raise fail("text", f"must be a string, got {_type_name(text)} ({text!r:.60})")
    for key, string in (("image", image), ("text", text)):
        if isinstance(string, str) and not is_encodable(string):
            raise fail(key, NOT_UNICODE)
    video = item.get("video")
    if video is not None:
        problem = check_video_value(video)
        if problem:
            raise fail("video", problem)
        if image is not None:
            raise fail("video", "an item has an image or a video, not both")
        if isinstance(video, tuple):
            item["video"] = list(video)
    if image is None and video is None and (text is None or not text.strip()):
        raise fail("image", "item has neither an image nor a text, nor a video (it needs a non-empty 'image', "
                            "'text' or 'video')")
    if "bbox" in item:
        if image is None:
            raise fail("bbox", "a bbox crops the item's image, but the item has no image")
        item["bbox"] = check_bbox(item["bbox"], where("bbox"), path=path, line=line)  # type: ignore[arg-type]
    return item


class ResolvedItem(NamedTuple):
    """A validated item with its image resolved: immutable, hashable, and *the* answer to "are
    two items the same" (loss labels, the evaluation pools, the benchmark loader's shared items).
    A named tuple rather than a frozen dataclass: built once per training row when labels are
    encoded, and a tuple is several times cheaper to build.

    ``image`` is the resolved location (``resolve_image``: a normalised path, a URL or a data
    URI) or None; ``bbox`` a tuple, as written; ``video`` the resolved folder or file, or a
    tuple of resolved frames (:func:`vis_embed.data.video.resolve_video`), or None.  Two items
    are equal when they name the same resolved image (or video), box and text (``[0, 0, 8, 8]``
    equals ``[0.0, 0.0, 8.0, 8.0]``).
    :meth:`signature` is the one content signature (the evaluation cache, encode shards):
    with ``file_digest`` (e.g. ``ContentHasher.file``) a local image stands for its bytes, so
    an image changed in place is never served stale.
    """

    image: str | None
    text: str | None
    bbox: tuple[float, ...] | None = None  # as written (ints stay ints)
    video: str | tuple[str, ...] | None = None

    @classmethod
    def of(cls, value: Any, base_dir: str | Path | None = None, *, field: str | None = None,
           path: str | Path | None = None, line: int | None = None) -> ResolvedItem:
        """The checked (:func:`check_item`) item ``value`` with its image resolved against ``base_dir``."""
        item = check_item(value, field, path=path, line=line)
        image, frames = item.get("image"), item.get("video")
        in_memory = [image] + (frames if isinstance(frames, list) else [])
        if any(value is not None and not isinstance(value, (str, os.PathLike)) for value in in_memory):
            raise DataError("an in-memory (PIL) image has no location to resolve; save it to a file",
                            path=path, line=line, field=field)
        return cls.unchecked({**item, "image": None if image is None else resolve_image(image, base_dir),
                              "video": None if frames is None else resolve_video(frames, base_dir)})

    @classmethod
    def unchecked(cls, item: Item) -> ResolvedItem:
        """An item that is already checked and resolved (no validation: the caller's promise).
        ``TypeError`` for a ``bbox`` that is not a sequence."""
        bbox, video = item.get("bbox"), item.get("video")
        return cls(image=item.get("image"), text=item.get("text"),
                   bbox=None if bbox is None else tuple(bbox),
                   video=tuple(video) if isinstance(video, (list, tuple)) else video)

    def as_dict(self) -> Item:
        """The plain item (``image``/``text``, ``bbox`` and ``video`` when set), what the model layer takes."""
        item: Item = {"image": self.image, "text": self.text}
        if self.bbox is not None:
            item["bbox"] = list(self.bbox)
        if self.video is not None:
            item["video"] = list(self.video) if isinstance(self.video, tuple) else self.video
        return item

    def signature(self, file_digest: Callable[[str], str | None] | None = None) -> str:
        """One string per distinct item: image, text, box and video.  An image (or a video file,
        or each frame) is its location, or with ``file_digest`` (local files only; it returns None
        for one it cannot read) ``"sha256:" + file_digest(path)``; a video folder is the list of
        its frame files so signed.  The video joins the signature only when set, so an image
        item's signature (and the caches keyed on it) is the same as before videos existed."""
        image = _signed(self.image, file_digest)
        box = None if self.bbox is None else list(self.bbox)
        parts: list[Any] = [image, self.text, box]
        if self.video is not None:
            parts.append(_signed_video(self.video, file_digest))
        return json.dumps(parts, ensure_ascii=False)


def _signed(location: str | None, file_digest: Callable[[str], str | None] | None) -> str | None:
    """A location, or ``"sha256:..."`` of the local file it names (with ``file_digest``)."""
    if file_digest is None or location is None or is_url(location) or is_data_uri(location):
        return location
    digest = file_digest(location)
    return location if digest is None else "sha256:" + digest


def _signed_video(video: str | tuple[str, ...], file_digest: Callable[[str], str | None] | None) -> Any:
    """A video's part of the signature: its frames (a list, a folder's listing) or its file, each signed."""
    if isinstance(video, tuple):
        return [_signed(frame, file_digest) for frame in video]
    if file_digest is not None and os.path.isdir(video):
        try:
            return [video, [_signed(frame, file_digest) for frame in frame_files(video)]]
        except DataError:  # no frames: the encode reports it; the signature stays the folder
            return video
    return _signed(video, file_digest)
