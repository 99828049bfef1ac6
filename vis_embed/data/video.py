"""Loading video items: a folder of frames, a list of frame files, or a video file -> frames.

An item's ``video`` is one of

* a folder of frame images (the released MMEB-V2 form: pre-extracted JPEGs); its frames are
  the regular files with an image suffix (:data:`FRAME_SUFFIXES`), hidden files left out,
  **naturally sorted** (``frame_2`` before ``frame_10``);
* a list of frame sources, in order: each one anything an ``image`` may be (path, URL, data URI;
  in the Python API also a PIL image: the server hands decoded frames this way);
* a video file (any suffix that is not a folder), decoded with PyAV (the optional extra
  ``video``: ``pip install 'vis_embed[video]'``).

The frames the model sees (:func:`frame_indices`) follow VLM2Vec's ``process_video_frames``:
with at least ``num_frames`` frames, ``np.linspace(0, n - 1, num_frames, dtype=int)`` picks
them; with fewer, every frame is kept once (VLM2Vec does not repeat them).  The Qwen-VL video
processors merge frame pairs (temporal patch size 2) and pad an odd count by repeating the
last frame; that padding is made explicit here, so a 3-frame clip is frames ``[0, 1, 2, 2]``
on every architecture.

Frame images go through :func:`vis_embed.data.images.load_image` (its format allow-list,
decompression-bomb limit, regular files only, fast decode); a video file's frames are decoded
by :mod:`vis_embed.data.video_file` (bounded work, seeking, rotation) and then go through the
same ``load_image`` as a PIL image.  Each distinct picked frame is handed to the caller's
``fit_frame`` as soon as it is loaded, frame 0 first: the model layer brings it to the clip's
grid there (``model/inputs/preparer.py``), so a clip never holds its frames at full size.

Time: a video file's frames carry the file's rate and their source positions; a clip given as
frames records no rate, and is presented as qwen-vl-utils presents a frame list -- its picked
frames one after another at :data:`FRAMES_FPS` (:meth:`Clip.video_metadata`), whichever frames
of the folder they were picked from.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vis_embed.data.images import image_size, is_data_uri, is_url, load_image, resolve_image
from vis_embed.errors import ConfigError, DataError

# A folder's frames: image files by suffix (VLM2Vec reads .jpg/.jpeg/.png; the other formats of
# the image allow-list are accepted too, the format itself is checked when a frame is opened).
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm")
MAX_FOLDER_FRAMES = 100_000  # a folder listing is refused beyond this many frame files
MAX_LIST_FRAMES = 10_000  # an item's list of frames
TEMPORAL_PATCH = 2  # Qwen2/2.5/3-VL merge frame pairs: an odd clip repeats its last frame
# The frame rate of a clip given as frames (a folder, a list), which record none: qwen-vl-utils'
# FPS for frame lists.  Qwen2.5-VL spaces frame pairs by it (2 frames at 2 fps: 1 s, transformers'
# own default when no rate is known) and Qwen3-VL writes timestamps from it.  A video file's
# frames carry the file's rate and their source positions instead.
FRAMES_FPS = 2.0


@dataclass
class Clip:
    """The picked frames of one video (RGB) and where they come from."""

    frames: list[Image.Image]
    indices: list[int]  # the source frame of each picked frame (repeats included)
    fps: float = FRAMES_FPS  # a video file's frame rate; FRAMES_FPS for frames
    timeline: list[int] | None = None  # positions on the ``fps`` timeline; None: ``indices`` (a file's)

    def video_metadata(self) -> dict[str, Any]:
        """What the processor is told of the clip's time (transformers' VideoMetadata fields):
        Qwen2.5-VL spaces frame pairs by it, Qwen3-VL writes timestamps from it."""
        positions = self.indices if self.timeline is None else self.timeline
        return {"fps": self.fps, "frames_indices": positions, "total_num_frames": max(positions) + 1}


def frames_timeline(picked: list[int]) -> list[int]:
    """A clip given as frames on its :data:`FRAMES_FPS` timeline: the picked frames one after
    another, padding included, as qwen-vl-utils presents a frame list (``frames_indices =
    range(len(video))``, whose tooling VLM2Vec's MMEB-V2 frame folders were made for)."""
    return list(range(len(picked)))


FitFrame = Callable[[Image.Image], Image.Image]


def natural_key(name: str) -> tuple[list[Any], str]:
    """Sort key: digit runs compare as numbers, the rest case-insensitively (``frame_2 < frame_10``);
    names equal so (``frame_1``, ``frame_01``, ``A1``, ``a1``) by the name itself, so the order never
    depends on the folder's listing order.  The split's odd parts are the digit runs: a part such as
    ``²`` is a digit to ``str.isdigit`` but not a number to ``int``."""
    parts = re.split(r"(\d+)", name)
    return [int(part) if index % 2 else part.lower() for index, part in enumerate(parts)], name


def frame_indices(count: int, num_frames: int, multiple: int = TEMPORAL_PATCH) -> list[int]:
    """The frames a clip of ``count`` frames gives the model (see the module docstring): VLM2Vec's
    linspace pick (all frames when fewer), padded with the last to a multiple of ``multiple``."""
    if count < 1:
        raise ValueError("a clip needs at least one frame")
    if count >= num_frames:
        picked = np.linspace(0, count - 1, num_frames, dtype=int).tolist()
    else:
        picked = list(range(count))
    picked += [picked[-1]] * (-len(picked) % multiple)
    return picked


def is_frame_list(video: Any) -> bool:
    return isinstance(video, (list, tuple))


def resolve_video(video: Any, base_dir: str | Path | None = None) -> str | tuple[str, ...]:
    """The video's location(s): a folder or file path resolved like an image path (against
    ``base_dir``: the data file's folder or ``image_root``), or a tuple of resolved frames."""
    if is_frame_list(video):  # a decoded (PIL) frame stays as it is
        return tuple(frame if hasattr(frame, "convert") else resolve_image(frame, base_dir) for frame in video)
    return resolve_image(video, base_dir)


def frame_files(folder: str | Path) -> list[str]:
    """The folder's frame files, naturally sorted (regular files with a frame suffix, hidden
    files left out); DataError naming the folder when it has none or too many."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.lower().endswith(FRAME_SUFFIXES):
                    continue
                if not entry.is_file():  # follows links; FIFOs and folders are left out
                    continue
                names.append(entry.name)
                if len(names) > MAX_FOLDER_FRAMES:
                    raise DataError(f"refused: more than {MAX_FOLDER_FRAMES} frame files in the video folder",
                                    path=str(folder))
    except OSError as exc:
        raise DataError(f"cannot list the video folder ({exc.strerror})", path=str(folder)) from None
    if not names:
        raise DataError(f"the video folder has no frame files ({', '.join(FRAME_SUFFIXES)})", path=str(folder))
    names.sort(key=natural_key)
    return [os.path.join(folder, name) for name in names]


def video_sources(video: Any, base_dir: str | Path | None = None) -> list[str] | str:
    """A video's frame sources in order (a folder listed, a list resolved), or the resolved path
    of a video file (a str)."""
    resolved = resolve_video(video, base_dir)
    if isinstance(resolved, tuple):
        if not resolved:
            raise DataError("the video's frame list is empty")
        return list(resolved)
    if is_url(resolved) or is_data_uri(resolved):
        raise DataError("a video must be a local folder of frames, a list of frames or a local video file "
                        "(a URL or data URI is accepted per frame, in a list)", path=resolved[:60])
    try:
        mode = os.stat(resolved).st_mode
    except FileNotFoundError:
        raise DataError("video not found", path=resolved) from None
    except OSError as exc:
        raise DataError(f"video is not readable ({exc.strerror})", path=resolved) from None
    except ValueError:  # JSON's "\u0000" in the path: os.stat's "embedded null byte"
        raise DataError("video path holds a NUL character", path=resolved.replace("\0", "\\0")) from None
    return frame_files(resolved) if stat.S_ISDIR(mode) else resolved


def load_video(video: Any, base_dir: str | Path | None = None, num_frames: int = 8, *,
               multiple: int = TEMPORAL_PATCH, fit_frame: FitFrame | None = None, **image_options: Any) -> Clip:
    """The clip's picked frames (:func:`frame_indices`) as RGB PIL images; only the picked
    frames are decoded, each through ``load_image`` with ``image_options`` (max_pixels, decode,
    target_size, url_policy, max_decode_s) and then ``fit_frame``, in ascending source order
    (frame 0 first) as it is loaded.  DataError naming the video or frame."""
    def take(source: Any) -> Image.Image:
        image = load_image(source, **image_options)
        return image if fit_frame is None else fit_frame(image)

    sources = video_sources(video, base_dir)
    if isinstance(sources, str):
        from vis_embed.data.video_file import decode_video_file  # PyAV: the optional extra

        decoded = decode_video_file(sources, lambda count: frame_indices(count, num_frames, multiple), take=take)
        return Clip(decoded.frames, decoded.indices, decoded.fps or FRAMES_FPS)
    picked = frame_indices(len(sources), num_frames, multiple)
    loaded: dict[int, Image.Image] = {}
    for index in picked:
        if index not in loaded:  # a repeated frame is decoded once
            loaded[index] = take(sources[index])
    return Clip([loaded[index] for index in picked], picked, timeline=frames_timeline(picked))


def first_frame_size(sources: list[Any] | str) -> tuple[int, int] | None:
    """(width, height) of a clip's first frame (always a picked one) from headers only, given its
    :func:`video_sources`; None when unknown (a URL frame, an unreadable file): a length hint."""
    try:
        if isinstance(sources, str):
            from vis_embed.data.video_file import stream_size

            return stream_size(sources)
        return image_size(sources[0])  # the first picked frame is always frame 0
    except (DataError, ConfigError):
        return None


def check_video_value(video: Any) -> str | None:
    """Why ``video`` cannot be an item's video (a message), or None: a non-empty path string or
    ``os.PathLike``, or a non-empty list of them (at most :data:`MAX_LIST_FRAMES`)."""
    if is_frame_list(video):
        if not video:
            return "the list of frames is empty"
        if len(video) > MAX_LIST_FRAMES:
            return f"more than {MAX_LIST_FRAMES} frames in the list"
        for position, frame in enumerate(video):
            problem = _path_problem(frame, frame=True)
            if problem:
                return f"frame [{position}] {problem}"
        return None
    return _path_problem(video)


def _path_problem(value: Any, frame: bool = False) -> str | None:
    if isinstance(value, os.PathLike) or (frame and hasattr(value, "convert")):  # a PIL frame: the Python API
        return None
    if not isinstance(value, str):
        return f"must be a path (a folder of frames or a video file) or a list of frame paths, " \
               f"got {'null' if value is None else type(value).__name__}"
    if not value.strip():
        return "must not be empty"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "is not valid Unicode (it holds a lone surrogate such as \\ud800)"
    return None

