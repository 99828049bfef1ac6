"""Video files (PyAV, data/video_file.py): bounded work, seeking that lands on the frame decoding
in order gives, rotation as a player shows it, and each frame handed on as it is decoded."""

from __future__ import annotations

import gc
import weakref
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vis_embed.data import video_file
from vis_embed.data.video import frame_indices, load_video
from vis_embed.errors import DataError

av = pytest.importorskip("av", reason="PyAV (the `video` extra) decodes video files")


def _coded(index: int, size: tuple[int, int] = (192, 32)) -> np.ndarray:
    """A frame whose 12 vertical bands spell ``index`` in binary (survives lossy coding)."""
    width, height = size
    pixels = np.zeros((height, width, 3), np.uint8)
    band = width // 12
    for bit in range(12):
        if (index >> bit) & 1:
            pixels[:, bit * band:(bit + 1) * band] = 255
    return pixels


def _index_of(image: Image.Image) -> int:
    pixels = np.asarray(image.convert("L").resize((192, 32)))
    return sum(1 << bit for bit in range(12) if pixels[:, bit * 16 + 4:(bit + 1) * 16 - 4].mean() > 128)


def _write(path: Path, frames: list[np.ndarray], *, skip_after: frozenset[int] = frozenset(),
           rotation: int | None = None, gop: int | None = None) -> None:
    """An mpeg4 stream at 30 fps (a keyframe every ``gop`` frames; mpeg4's default: 12); after each
    frame in ``skip_after`` one timestamp is left out (a dropped frame: the stream's positions and
    its constant-rate timestamps part there)."""
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=30)
        stream.height, stream.width = frames[0].shape[:2]
        stream.pix_fmt = "yuv420p"
        if gop is not None:
            stream.codec_context.gop_size = gop
        stream.options = {"qscale": "2"}
        stream.codec_context.time_base = Fraction(1, 30)
        if rotation is not None:
            stream.set_display_rotation(rotation)
        pts = 0
        for index, pixels in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(pixels, format="rgb24")
            frame.pts, frame.time_base = pts, Fraction(1, 30)
            for packet in stream.encode(frame):
                container.mux(packet)
            pts += 2 if index in skip_after else 1
        for packet in stream.encode():
            container.mux(packet)


def _decode(path: Path, frames: int = 8, **options: object) -> video_file.DecodedFrames:
    return video_file.decode_video_file(str(path), lambda count: frame_indices(count, frames), **options)


def test_a_video_file_is_decoded_with_bounded_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("clip.mkv", "clip.mp4"):  # no frame count in the container (packets counted); a recorded one
        clip = tmp_path / name
        _write(clip, [_coded(index) for index in range(11)])
        decoded = _decode(clip)
        assert decoded.indices == np.linspace(0, 10, 8, dtype=int).tolist()
        assert [_index_of(frame) for frame in decoded.frames] == decoded.indices
    with pytest.raises(DataError, match="took too long"):
        _decode(clip, max_decode_s=0.0)
    monkeypatch.setattr(video_file, "MAX_VIDEO_FRAMES", 10)
    with pytest.raises(DataError, match="more than 10 frames"):
        _decode(clip)
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(DataError, match="cannot read video file"):
        _decode(tmp_path / "empty.mp4")


@pytest.mark.parametrize("name", ["clip.mp4", "clip.mkv"])
@pytest.mark.parametrize("skip_after", [frozenset(), frozenset({10}), frozenset({3, 17, 30})])
def test_far_apart_frames_are_reached_by_seeking_to_the_frames_decoding_in_order_gives(
        tmp_path: Path, name: str, skip_after: frozenset[int], monkeypatch: pytest.MonkeyPatch) -> None:
    # A dropped timestamp once made a seek by "position x frame duration" land one frame late,
    # unnoticed (its +-half-frame check cannot see a whole frame missing before the target).
    clip = tmp_path / name
    _write(clip, [_coded(index) for index in range(40)], skip_after=skip_after)
    in_order = _decode(clip)
    monkeypatch.setattr(video_file, "SEEK_GAP", 0)
    monkeypatch.setattr(video_file, "_decode_picked", lambda *args: pytest.fail("decoded in order, not sought"))
    sought = _decode(clip)
    assert sought.indices == in_order.indices == np.linspace(0, 39, 8, dtype=int).tolist()
    assert [_index_of(frame) for frame in sought.frames] == sought.indices
    for ours, reference in zip(sought.frames, in_order.frames):
        assert np.array_equal(np.asarray(ours), np.asarray(reference))


@pytest.mark.parametrize("name", ["clip.mp4", "clip.mkv"])
def test_seeking_in_a_long_gop_decodes_no_frame_twice(tmp_path: Path, name: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # One keyframe for the whole video (a screen recording's, an encoder's "infinite" keyint):
    # each picked frame's seek once landed on frame 0 and decoded from there again -- 4x the
    # frames of decoding in order for 8 picks, 32x for 64, and the deadline's refusal of a
    # video decoding in order reads in time.
    clip = tmp_path / name
    _write(clip, [_coded(index) for index in range(60)], gop=1000)
    with av.open(str(clip)) as container:
        assert sum(packet.is_keyframe for packet in container.demux(video=0) if packet.size) == 1
    in_order = _decode(clip)
    monkeypatch.setattr(video_file, "SEEK_GAP", 0)
    monkeypatch.setattr(video_file, "_decode_picked", lambda *args: pytest.fail("decoded in order, not sought"))
    decoded = [0]
    check_frame = video_file._check_frame

    def counted(*args: object) -> None:
        decoded[0] += 1
        check_frame(*args)

    monkeypatch.setattr(video_file, "_check_frame", counted)
    sought = _decode(clip)
    assert sought.indices == in_order.indices == np.linspace(0, 59, 8, dtype=int).tolist()
    assert [_index_of(frame) for frame in sought.frames] == sought.indices
    for ours, reference in zip(sought.frames, in_order.frames):
        assert np.array_equal(np.asarray(ours), np.asarray(reference))
    assert decoded[0] <= 60, f"{decoded[0]} frames decoded for a 60-frame video"


def test_a_stream_without_an_average_rate_keeps_its_own(tmp_path: Path) -> None:
    # MPEG-4 part 2 in an MPEG-TS records no average rate; its clip was once told 2 fps (the rate
    # of a clip of frames) with its 30 fps source positions: Qwen3-VL's timestamps 15x too late.
    clip = tmp_path / "clip.ts"
    with av.open(str(clip), mode="w", format="mpegts") as container:
        stream = container.add_stream("mpeg4", rate=30)
        stream.height, stream.width, stream.pix_fmt = 32, 192, "yuv420p"
        for index in range(30):
            frame = av.VideoFrame.from_ndarray(_coded(index), format="rgb24")
            frame.pts, frame.time_base = index, Fraction(1, 30)
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    with av.open(str(clip)) as container:
        assert container.streams.video[0].average_rate is None
    loaded = load_video(str(clip), None, 8)
    assert loaded.fps == 30.0 and loaded.video_metadata()["fps"] == 30.0


def test_a_rotated_video_is_decoded_upright(tmp_path: Path) -> None:
    # A phone's portrait clip: stored 96x64 with a display matrix of -90 degrees (counterclockwise;
    # what ffprobe prints as "rotation of -90.00 degrees" for an iPhone portrait video), shown
    # turned 90 degrees clockwise: the stored top-left corner ends at the top right.
    stored = np.zeros((64, 96, 3), np.uint8)
    stored[:16, :16] = 255
    clip = tmp_path / "portrait.mp4"
    _write(clip, [stored] * 4, rotation=-90)
    frame = _decode(clip, 2).frames[0]
    assert frame.size == (64, 96)
    pixels = np.asarray(frame.convert("L"))
    assert pixels[:12, -12:].mean() > 200 and pixels[:12, :12].mean() < 50
    assert video_file.stream_size(str(clip)) == (96, 64)  # the header's stored shape: a token count is the same


def test_each_frame_is_handed_on_as_it_is_decoded_and_its_full_size_let_go(tmp_path: Path) -> None:
    # A clip of 64 frames at 4096x4096 held 3 GB of RGB before the model's resize; now the model's
    # resize (``fit_frame``) takes each frame as it is decoded and the full-size one is dropped.
    clip = tmp_path / "clip.mp4"
    _write(clip, [_coded(index, (384, 64)) for index in range(12)])
    seen: list[int] = []
    alive: list[weakref.ref] = []

    def fit_frame(image: Image.Image) -> Image.Image:
        gc.collect()
        assert all(ref() is None for ref in alive), "an earlier full-size frame is still held"
        alive.append(weakref.ref(image))
        seen.append(_index_of(image))
        return image.resize((48, 8))

    loaded = load_video(str(clip), None, 8, fit_frame=fit_frame)
    assert seen == sorted(set(loaded.indices)) and all(frame.size == (48, 8) for frame in loaded.frames)
