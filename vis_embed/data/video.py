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
decompression-bomb limit, regular files only, fast decode).  A video file is decoded with
bounded work: a video of more than :data:`MAX_VIDEO_FRAMES` frames is refused (from the
container's count, or its packets counted without decoding), frames above the
decompression-bomb limit are refused from the stream header, one deadline bounds the whole
decode (:data:`MAX_VIDEO_DECODE_S`); picked frames far apart are reached by seeking
(:data:`SEEK_GAP`), else decoding stops after the last picked frame.  Resizing the
frames to the model's per-frame budget is the model layer's job (``model/inputs/preparer.py``).
"""

from __future__ import annotations

import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vis_embed.data.images import (DEFAULT_MAX_IMAGE_PIXELS, check_regular_file, image_size, is_data_uri, is_url,
                                   load_image, resolve_image)
from vis_embed.errors import ConfigError, DataError

# A folder's frames: image files by suffix (VLM2Vec reads .jpg/.jpeg/.png; the other formats of
# the image allow-list are accepted too, the format itself is checked when a frame is opened).
FRAME_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".ppm")
MAX_FOLDER_FRAMES = 100_000  # a folder listing is refused beyond this many frame files
MAX_LIST_FRAMES = 10_000  # an item's list of frames
MAX_VIDEO_FRAMES = 36_000  # a video file with more frames is refused (20 minutes at 30 fps)
MAX_VIDEO_DECODE_S = 120.0  # one video file's whole decode
TEMPORAL_PATCH = 2  # Qwen2/2.5/3-VL merge frame pairs: an odd clip repeats its last frame
# Picked frames of a video file further apart than this are reached by seeking (the keyframe
# before each, then decoding forward to it) instead of decoding every frame between them.
SEEK_GAP = 240
VIDEO_EXTRA = "pip install 'vis_embed[video]'"
# The frame rate of a clip given as frames (a folder, a list), which record none: qwen-vl-utils'
# FPS for frame lists.  Qwen2.5-VL spaces frame pairs by it (2 frames at 2 fps: 1 s, transformers'
# own default when no rate is known) and Qwen3-VL writes timestamps from it.  A video file's
# frames carry the file's rate and their source positions instead.
FRAMES_FPS = 2.0


@dataclass
class Clip:
    """The picked frames of one video (RGB, as decoded) and where they come from."""

    frames: list[Image.Image]
    indices: list[int]  # the source frame of each picked frame (repeats included)
    fps: float = FRAMES_FPS  # a video file's frame rate; FRAMES_FPS for frames


def natural_key(name: str) -> list[Any]:
    """Sort key: digit runs compare as numbers, the rest case-insensitively (``frame_2 < frame_10``)."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name)]


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
    return frame_files(resolved) if stat.S_ISDIR(mode) else resolved


def load_video(video: Any, base_dir: str | Path | None = None, num_frames: int = 8, *,
               multiple: int = TEMPORAL_PATCH, **image_options: Any) -> Clip:
    """The clip's picked frames (:func:`frame_indices`) as RGB PIL images; only the picked
    frames are decoded.  ``image_options`` go to ``load_image`` for frame images (max_pixels,
    decode, target_size, url_policy, max_decode_s).  DataError naming the video or frame."""
    sources = video_sources(video, base_dir)
    if isinstance(sources, str):
        return decode_video_file(sources, num_frames, multiple=multiple)
    picked = frame_indices(len(sources), num_frames, multiple)
    loaded: dict[int, Image.Image] = {}
    for index in picked:
        if index not in loaded:  # a repeated frame is decoded once
            loaded[index] = load_image(sources[index], **image_options)
    return Clip([loaded[index] for index in picked], picked)


def first_frame_size(sources: list[Any] | str) -> tuple[int, int] | None:
    """(width, height) of a clip's first frame (always a picked one) from headers only, given its
    :func:`video_sources`; None when unknown (a URL frame, an unreadable file): a length hint."""
    try:
        if isinstance(sources, str):
            with _open_container(sources) as container:
                stream = _video_stream(container, sources)
                return int(stream.codec_context.width), int(stream.codec_context.height)
        return image_size(sources[0])  # the first picked frame is always frame 0
    except (DataError, ConfigError):
        return None


# ------------------------------------------------------------------ video files (PyAV)
def _require_av() -> Any:
    try:
        import av
    except ImportError:
        raise ConfigError(f"decoding a video file needs PyAV: {VIDEO_EXTRA} "
                          "(or give the video as a folder or list of frames)") from None
    return av


def _open_container(path: str) -> Any:
    av = _require_av()
    check_regular_file(path)  # a FIFO would block the open forever
    try:
        return av.open(path, mode="r", metadata_errors="ignore")
    except Exception as exc:  # noqa: BLE001  (FFmpeg's errors on hostile bytes are many)
        raise DataError(f"cannot read video file (not a video, or corrupt: {type(exc).__name__})", path=path) from None


def _video_stream(container: Any, path: str) -> Any:
    if not container.streams.video:
        raise DataError("the file has no video stream", path=path)
    stream = container.streams.video[0]
    width, height = int(stream.codec_context.width or 0), int(stream.codec_context.height or 0)
    if width * height > DEFAULT_MAX_IMAGE_PIXELS:
        raise DataError(f"refused: {width}x{height} frames exceed the decompression-bomb limit of "
                        f"{DEFAULT_MAX_IMAGE_PIXELS} pixels", path=path)
    return stream


def _frame_count(path: str, deadline: float) -> int:
    """The video stream's frame count: the container's when it records one, else its packets
    counted without decoding; a DataError past :data:`MAX_VIDEO_FRAMES` or the deadline."""
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        count = int(stream.frames or 0)
        if count <= 0:
            try:
                for packet in container.demux(stream):
                    count += packet.size > 0  # the flushing packet at the end carries no data
                    if count > MAX_VIDEO_FRAMES or time.monotonic() > deadline:
                        break
            except Exception as exc:  # noqa: BLE001
                raise DataError(f"cannot read video file (corrupt: {type(exc).__name__})", path=path) from None
        if time.monotonic() > deadline:
            raise DataError("refused: reading the video took too long", path=path)
        if count > MAX_VIDEO_FRAMES:
            raise DataError(f"refused: the video has more than {MAX_VIDEO_FRAMES} frames (extract the frames "
                            "to a folder and give that)", path=path)
        return count


def decode_video_file(path: str, num_frames: int, *, multiple: int = TEMPORAL_PATCH,
                      max_decode_s: float = MAX_VIDEO_DECODE_S) -> Clip:
    """The picked frames of a video file (PyAV): reached by seeking when they lie more than
    :data:`SEEK_GAP` frames apart in a constant-rate stream, else decoded in order up to the last."""
    deadline = time.monotonic() + max_decode_s
    count = _frame_count(path, deadline)
    for _ in range(2):  # a recorded count can be too high: once more with the frames really decoded
        if count < 1:
            raise DataError("the video has no frames", path=path)
        picked = frame_indices(count, num_frames, multiple)
        unique = sorted(set(picked))
        if len(unique) > 1 and min(b - a for a, b in zip(unique, unique[1:])) > SEEK_GAP:
            sought = _seek_picked(path, unique, deadline)
            if sought is not None:
                return Clip([sought[0][index] for index in picked], picked, sought[1] or FRAMES_FPS)
        frames, decoded, fps = _decode_picked(path, set(picked), deadline)
        if all(index in frames for index in picked):
            return Clip([frames[index] for index in picked], picked, fps or FRAMES_FPS)
        count = decoded
    raise DataError("the video's frames could not all be decoded", path=path)


def _seek_picked(path: str, wanted: list[int], deadline: float) -> tuple[dict[int, Image.Image], float] | None:
    """Frames at ``wanted`` positions, each reached by a seek to the keyframe before it and a
    decode forward; None (decode in order instead) unless every frame lands where a constant
    frame rate puts it (a variable-rate stream's positions are not its timestamps)."""
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        if not stream.average_rate or not stream.time_base:
            return None
        step = 1 / (stream.average_rate * stream.time_base)  # timestamp units per frame
        start = stream.start_time or 0
        frames: dict[int, Image.Image] = {}
        try:
            for index in wanted:
                target = start + index * step
                container.seek(int(target), stream=stream, backward=True, any_frame=False)
                for frame in container.decode(stream):
                    _check_frame(frame, path, deadline)
                    if frame.pts is None or frame.pts > target + step / 2:
                        return None  # no timestamps, or past the frame: not where the rate says
                    if frame.pts >= target - step / 2:
                        frames[index] = frame.to_image()
                        break
                else:
                    return None
        except DataError:
            raise
        except Exception:  # noqa: BLE001  (a failed seek: the in-order decode decides)
            return None
    return frames, float(stream.average_rate)


def _check_frame(frame: Any, path: str, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise DataError("refused: decoding the video took too long", path=path)
    if frame.width * frame.height > DEFAULT_MAX_IMAGE_PIXELS:
        raise DataError(f"refused: a {frame.width}x{frame.height} frame exceeds the decompression-bomb limit",
                        path=path)


def _decode_picked(path: str, wanted: set[int], deadline: float) -> tuple[dict[int, Image.Image], int, float | None]:
    """Frames at ``wanted`` positions (presentation order), how many were decoded, the frame rate."""
    frames: dict[int, Image.Image] = {}
    last = max(wanted)
    decoded = 0
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        fps = float(stream.average_rate) if stream.average_rate else None
        try:
            for position, frame in enumerate(container.decode(stream)):
                decoded = position + 1
                _check_frame(frame, path, deadline)
                if position in wanted:
                    frames[position] = frame.to_image()  # RGB
                if position >= last or decoded >= MAX_VIDEO_FRAMES:  # a recount can be no larger
                    break
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001  (a corrupt packet: FFmpeg's InvalidDataError and kin)
            raise DataError(f"cannot decode video file (corrupt: {type(exc).__name__})", path=path) from None
    return frames, decoded, fps


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

