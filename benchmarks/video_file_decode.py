"""A video file's picked frames: seeking (timestamps demuxed first) against decoding in order, and
the peak memory of a clip of large frames through the model's preparer.

1. ``--minutes`` of 30 fps video (``--size``, keyframe every ``--gop`` frames, mpeg4), 8 frames
   picked by VLM2Vec's rule (far apart: the seek path): ``load_video`` as the model runs it (the
   packets' timestamps read, then one seek and a short decode per frame) against
   ``_decode_picked`` (every frame decoded up to the last picked one).  Same pixels checked.
2. In a fresh process each: a clip of ``--big-frames`` frames of ``--big-size`` pixels through
   ``Preparer.load_video`` (each frame resized to the clip's grid as it is decoded), peak RSS
   against the same process's RSS before it (imports, the processor), ``exact`` and ``fast``.

    .venv/bin/python benchmarks/video_file_decode.py --quick      # smoke run (seconds)
    .venv/bin/python benchmarks/video_file_decode.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np


def write_video(path: Path, frames: int, size: tuple[int, int], gop: int) -> None:
    """``frames`` frames at 30 fps, each a different noise field (so no frame codes to nothing)."""
    import av

    width, height = size
    rng = np.random.default_rng(0)
    base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("mpeg4", rate=30)
        stream.width, stream.height, stream.pix_fmt, stream.gop_size = width, height, "yuv420p", gop
        stream.codec_context.time_base = Fraction(1, 30)
        for index in range(frames):
            frame = av.VideoFrame.from_ndarray(np.roll(base, index * 3, axis=1), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def seek_against_in_order(path: Path, picks: int) -> dict[str, Any]:
    from vis_embed.data import video_file
    from vis_embed.data.video import load_video

    started = time.perf_counter()
    clip = load_video(str(path), None, picks)
    sought_s = time.perf_counter() - started
    started = time.perf_counter()
    frames, _, _ = video_file._decode_picked(str(path), set(clip.indices), lambda image: image,
                                             time.monotonic() + 600)
    in_order_s = time.perf_counter() - started
    same = all(np.array_equal(np.asarray(frames[index]), np.asarray(image))
               for index, image in zip(clip.indices, clip.frames))
    return {"frames_in_file": max(clip.indices) + 1,  # the last frame is always picked
            "picked": clip.indices, "sought_s": round(sought_s, 3),
            "in_order_s": round(in_order_s, 3), "speedup": round(in_order_s / sought_s, 1),
            "same_pixels": same}


def peak_memory_child(path: str, frames: int, decode: str) -> None:
    """Run in a fresh process: print {before_mb, peak_mb} of one clip through the preparer."""
    from vis_embed.model.embedding_config import EmbeddingConfig
    from vis_embed.model.files.tiny import build_processor
    from vis_embed.model.inputs.preparer import Preparer

    preparer = Preparer(build_processor("qwen2-vl"), EmbeddingConfig(video_frames=frames, decode=decode))
    import av  # noqa: F401  (loaded before the baseline: its libraries are not the clip's memory)

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    clip = preparer.load_video({"video": path})
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"before_mb": round(before), "peak_mb": round(peak), "frames": len(clip.frames),
                      "frame_size": list(clip.frames[0].size)}))


def peak_memory(path: Path, frames: int, decode: str) -> dict[str, Any]:
    output = subprocess.run([sys.executable, __file__, "--child", str(path), str(frames), decode],
                            capture_output=True, text=True, check=True).stdout
    row = json.loads(output.strip().splitlines()[-1])
    row.update(decode=decode, clip_mb=row["peak_mb"] - row["before_mb"])
    return row


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        peak_memory_child(sys.argv[2], int(sys.argv[3]), sys.argv[4])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--size", type=int, nargs=2, default=[640, 360])
    parser.add_argument("--gop", type=int, default=250)
    parser.add_argument("--picks", type=int, default=8)
    parser.add_argument("--big-size", type=int, nargs=2, default=[4096, 4096])
    parser.add_argument("--big-frames", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="a smoke run: 20 s of video, 1024x1024 frames")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.minutes, args.big_size, args.big_frames = 1 / 3, [1024, 1024], 4
    with tempfile.TemporaryDirectory() as scratch:
        long_clip, big_clip = Path(scratch) / "long.mp4", Path(scratch) / "big.mp4"
        write_video(long_clip, int(args.minutes * 60 * 30), tuple(args.size), args.gop)
        write_video(big_clip, args.big_frames, tuple(args.big_size), args.gop)
        report = {"seek": seek_against_in_order(long_clip, args.picks),
                  "memory": [peak_memory(big_clip, args.big_frames, decode) for decode in ("exact", "fast")],
                  "full_size_clip_mb": round(args.big_frames * args.big_size[0] * args.big_size[1] * 3 / 2**20)}
    print(json.dumps(report, indent=1))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
