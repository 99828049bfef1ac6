"""Decoding a video file's picked frames with PyAV (the optional extra ``video``), with bounded work.

:func:`decode_video_file` returns the frames at the positions a picking rule names (the caller's:
:func:`vis_embed.data.video.frame_indices`), in presentation order, upright, each handed to the
caller's ``take`` as soon as it is decoded -- so a clip never holds more than one full-size frame
(``take`` brings it to the model's size: a 4096x4096 clip of 64 frames would otherwise hold
3 GB of RGB before the first resize).

Bounded work: a video of more than :data:`MAX_VIDEO_FRAMES` frames is refused (the container's
count, or its packets counted without decoding); frames above the decompression-bomb limit are
refused from the stream header; one deadline bounds the whole decode (``max_decode_s``).  Picked
frames further apart than :data:`SEEK_GAP` are reached by seeking: the packets' timestamps are
read first (a demux, no decode), so frame k is the one at the k-th smallest timestamp -- the frame
decoding in order gives at position k, whatever gaps or rate changes the stream has (no keyframe
between the frame last decoded and the next picked one: decoded on, not sought); a seek that
does not land on that exact timestamp falls back to decoding in order.

Rotation: a phone's portrait video is stored sideways with a display matrix; its frames are
turned as a player shows them (FFmpeg's autorotate), as images are by their EXIF orientation.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from PIL import Image

from vis_embed.data.images import DEFAULT_MAX_IMAGE_PIXELS, check_regular_file
from vis_embed.errors import ConfigError, DataError

MAX_VIDEO_FRAMES = 36_000  # a video file with more frames is refused (20 minutes at 30 fps)
MAX_VIDEO_DECODE_S = 120.0  # one video file's whole decode
# Picked frames of a video file further apart than this are reached by seeking (the keyframe
# before each, then decoding forward to it) instead of decoding every frame between them.
SEEK_GAP = 240
VIDEO_EXTRA = "pip install 'vis_embed[video]'"
# PyAV's frame.rotation: degrees the display matrix turns the stored frame counterclockwise.
_TURNS = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}

Take = Callable[[Image.Image], Image.Image]


class _Packets(NamedTuple):
    """The video stream's packets read without decoding: each one's presentation timestamp, in
    presentation order (ascending; None first for a packet without one), and the keyframes'."""

    timestamps: list[int | None]
    keyframes: list[int]


class DecodedFrames(NamedTuple):
    frames: list[Image.Image]  # one per picked position (repeats share an image)
    indices: list[int]  # the picked positions (repeats included)
    fps: float | None  # the stream's average rate, when it records one


def decode_video_file(path: str, pick: Callable[[int], list[int]], *, take: Take | None = None,
                      max_decode_s: float = MAX_VIDEO_DECODE_S) -> DecodedFrames:
    """The frames at ``pick(frame count)`` of a video file: sought when they lie more than
    :data:`SEEK_GAP` frames apart, else decoded in order up to the last; each distinct frame is
    passed through ``take`` in ascending position (frame 0 first), as it is decoded."""
    deadline = time.monotonic() + max_decode_s
    take = take or (lambda image: image)
    count, packets = _frame_count(path, deadline)
    for _ in range(2):  # a recorded count can be too high: once more with the frames really decoded
        if count < 1:
            raise DataError("the video has no frames", path=path)
        picked = pick(count)
        unique = sorted(set(picked))
        if len(unique) > 1 and min(b - a for a, b in zip(unique, unique[1:])) > SEEK_GAP:
            packets = packets or _read_packets(path, deadline)
            sought = _seek_picked(path, unique, packets, take, deadline) if len(packets.timestamps) == count else None
            if sought is not None:
                return DecodedFrames([sought[0][index] for index in picked], picked, sought[1])
        frames, decoded, fps = _decode_picked(path, set(picked), take, deadline)
        if all(index in frames for index in picked):
            return DecodedFrames([frames[index] for index in picked], picked, fps)
        count, packets = decoded, None
    raise DataError("the video's frames could not all be decoded", path=path)


def stream_size(path: str) -> tuple[int, int]:
    """(width, height) of the video stream's frames as stored, from the header.  (A rotated video's
    frames are turned a quarter when decoded; a token count of either shape is the same.)"""
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        return int(stream.codec_context.width), int(stream.codec_context.height)


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


def _frame_count(path: str, deadline: float) -> tuple[int, _Packets | None]:
    """The video stream's frame count -- the container's when it records one, else its packets
    counted -- and the packets when they were read (None otherwise)."""
    with _open_container(path) as container:
        count = int(_video_stream(container, path).frames or 0)
    if count > 0:
        _check_count(count, path)
        return count, None
    packets = _read_packets(path, deadline)
    return len(packets.timestamps), packets


def _read_packets(path: str, deadline: float) -> _Packets:
    """The video stream's packets' timestamps (:class:`_Packets`): a demux, no frame decoded.  A
    DataError past :data:`MAX_VIDEO_FRAMES` or the deadline."""
    timestamps: list[int | None] = []
    keyframes: list[int] = []
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        try:
            for packet in container.demux(stream):
                if packet.size > 0:  # the flushing packet at the end carries no data
                    timestamps.append(packet.pts)
                    if packet.is_keyframe and packet.pts is not None:
                        keyframes.append(packet.pts)
                if len(timestamps) > MAX_VIDEO_FRAMES or time.monotonic() > deadline:
                    break
        except Exception as exc:  # noqa: BLE001
            raise DataError(f"cannot read video file (corrupt: {type(exc).__name__})", path=path) from None
    if time.monotonic() > deadline:
        raise DataError("refused: reading the video took too long", path=path)
    _check_count(len(timestamps), path)
    return _Packets(sorted(timestamps, key=lambda pts: (pts is not None, pts or 0)), sorted(keyframes))


def _check_count(count: int, path: str) -> None:
    if count > MAX_VIDEO_FRAMES:
        raise DataError(f"refused: the video has more than {MAX_VIDEO_FRAMES} frames (extract the frames "
                        "to a folder and give that)", path=path)


def _seek_picked(path: str, wanted: list[int], packets: _Packets, take: Take,
                 deadline: float) -> tuple[dict[int, Image.Image], float | None] | None:
    """Frames at ``wanted`` positions, each reached by a seek to the keyframe before its timestamp
    and a decode forward to it -- or, when no keyframe lies between the frame last decoded and it
    (a long GOP), by decoding on from there: a seek would decode that stretch again -- and the
    frame rate; None (decode in order instead) unless every one lands exactly on the timestamp
    its position has."""
    timestamps, keyframes = packets
    if any(timestamps[index] is None for index in wanted):
        return None
    frames: dict[int, Image.Image] = {}
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        fps = _rate(stream)
        decoding, position = None, None  # the decode under way, the timestamp it last gave
        try:
            for index in wanted:
                target = timestamps[index]
                before = bisect.bisect_right(keyframes, target)
                if decoding is None or position is None or (before and keyframes[before - 1] > position):
                    container.seek(target, stream=stream, backward=True, any_frame=False)
                    decoding = container.decode(stream)
                for frame in decoding:
                    _check_frame(frame, path, deadline)
                    if frame.pts is None or frame.pts > target:
                        return None  # no timestamps, or past the frame: decode in order
                    position = frame.pts
                    if frame.pts == target:
                        frames[index] = take(upright(frame))
                        break
                else:
                    return None
        except DataError:
            raise
        except Exception:  # noqa: BLE001  (a failed seek: the in-order decode decides)
            return None
    return frames, fps


def _decode_picked(path: str, wanted: set[int], take: Take,
                   deadline: float) -> tuple[dict[int, Image.Image], int, float | None]:
    """Frames at ``wanted`` positions (presentation order), how many were decoded, the frame rate."""
    frames: dict[int, Image.Image] = {}
    last = max(wanted)
    decoded = 0
    with _open_container(path) as container:
        stream = _video_stream(container, path)
        fps = _rate(stream)
        try:
            for position, frame in enumerate(container.decode(stream)):
                decoded = position + 1
                _check_frame(frame, path, deadline)
                if position in wanted:
                    frames[position] = take(upright(frame))
                if position >= last or decoded >= MAX_VIDEO_FRAMES:  # a recount can be no larger
                    break
        except DataError:
            raise
        except Exception as exc:  # noqa: BLE001  (a corrupt packet: FFmpeg's InvalidDataError and kin)
            raise DataError(f"cannot decode video file (corrupt: {type(exc).__name__})", path=path) from None
    return frames, decoded, fps


def _rate(stream: Any) -> float | None:
    """The stream's average frame rate, else FFmpeg's guess (an MPEG-TS of MPEG-4 part 2 records
    no average: the caller's 2 fps for frames would stretch its source positions' time 15x)."""
    rate = stream.average_rate or stream.guessed_rate
    return float(rate) if rate else None


def _check_frame(frame: Any, path: str, deadline: float) -> None:
    if time.monotonic() > deadline:
        raise DataError("refused: decoding the video took too long", path=path)
    if frame.width * frame.height > DEFAULT_MAX_IMAGE_PIXELS:
        raise DataError(f"refused: a {frame.width}x{frame.height} frame exceeds the decompression-bomb limit",
                        path=path)


def upright(frame: Any) -> Image.Image:
    """The decoded frame as an RGB image, turned as its display matrix says (PyAV < 14 reads none)."""
    image = frame.to_image()
    turn = _TURNS.get(round(getattr(frame, "rotation", 0) or 0) % 360)
    return image if turn is None else image.transpose(turn)
