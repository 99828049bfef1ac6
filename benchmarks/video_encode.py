"""Video items/s against images/s on CPU, same model, same frame size, same Embedder.encode.

Items: ``--items`` clips, each a folder of ``--source-frames`` PNG frames (``--frame-size``; the
MMEB-V2 form: pre-extracted frames), of which the model sees ``--frames`` (VLM2Vec's pick, 8 by
default); and ``--items`` single images of that same size.  Both are encoded by one Embedder
(``batch_size``, ``--workers`` as `vis-embed encode` takes them) and timed end to end: frames
decoded, resized to the per-frame budget (``--video-max-pixels``), processed, forwarded.  The
vectors of a clip are checked to equal those of the list of its picked frames before timing.

A clip of F frames is F/2 frame pairs: F/2 times an image's visual tokens at the same budget
(``--video-max-pixels`` equal to ``--max-pixels`` by default so the ratio reads that way),
so expect videos/s near images/s / (F/2) once the model, not the decoding, dominates.

    .venv/bin/python benchmarks/video_encode.py --quick                      # smoke run (seconds)
    .venv/bin/python benchmarks/video_encode.py --preset qwen2-vl-2b-shallow --items 32 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image


def write_clips(root: Path, items: int, source_frames: int, size: tuple[int, int]) -> tuple[list, list]:
    """``items`` clip folders and ``items`` images (the first frame of each clip), deterministic."""
    rng = np.random.default_rng(0)
    clips, images = [], []
    width, height = size
    for index in range(items):
        folder = root / f"clip_{index:04d}"
        folder.mkdir(parents=True)
        base = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        for frame in range(source_frames):  # a moving image: the base rolled a little each frame
            Image.fromarray(np.roll(base, 3 * frame, axis=1)).save(folder / f"frame_{frame}.png")
        clips.append({"video": str(folder)})
        images.append({"image": str(folder / "frame_0.png")})
    return clips, images


def timed_rate(embedder: Any, items: list, batch_size: int, repeats: int) -> tuple[float, np.ndarray]:
    """Items per second of ``embedder.encode`` (fastest of ``repeats``) and the vectors."""
    best = float("inf")
    vectors = None
    for _ in range(repeats):
        start = time.perf_counter()
        vectors = embedder.encode(items, "Represent the given video.", batch_size=batch_size)
        best = min(best, time.perf_counter() - start)
    return len(items) / best, vectors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="tiny", help="model size (vis_embed.model.files.tiny.PRESETS)")
    parser.add_argument("--arch", default="qwen2-vl")
    parser.add_argument("--items", type=int, default=16, help="clips, and as many images")
    parser.add_argument("--frames", type=int, default=8, help="video_frames: frames the model sees")
    parser.add_argument("--source-frames", type=int, default=32, help="frames in each clip folder")
    parser.add_argument("--frame-size", default="448x336", help="WIDTHxHEIGHT of every frame and image")
    parser.add_argument("--max-pixels", type=int, default=200704, help="image pixel budget")
    parser.add_argument("--video-max-pixels", type=int, default=None, help="per-frame budget (default: --max-pixels)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--repeats", type=int, default=2, help="keep the fastest of this many timed runs")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 clips of 6 small frames, 1 repeat")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args()
    if args.quick:
        args.items, args.source_frames, args.frame_size, args.repeats = 2, 6, "112x84", 1

    import torch

    from vis_embed.model.runtime.embedder import Embedder
    from vis_embed.model.files.tiny import build_tiny_checkpoint
    from vis_embed.provenance import provenance

    if args.threads:
        torch.set_num_threads(args.threads)
    width, height = (int(side) for side in args.frame_size.split("x"))
    root = Path(tempfile.mkdtemp(prefix="video-encode-"))
    try:
        checkpoint = build_tiny_checkpoint(root / "model", arch=args.arch, preset=args.preset)
        clips, images = write_clips(root / "clips", args.items, args.source_frames, (width, height))
        embedder = Embedder.from_pretrained(checkpoint, device="cpu", max_pixels=args.max_pixels,
                                            video_frames=args.frames,
                                            video_max_pixels=args.video_max_pixels or args.max_pixels)
        # the rule before the figures: a clip equals the list of its picked frames
        picked = np.linspace(0, args.source_frames - 1, args.frames, dtype=int) \
            if args.source_frames >= args.frames else np.arange(args.source_frames)
        frames = [str(Path(clips[0]["video"]) / f"frame_{index}.png") for index in picked]
        check = embedder.encode([clips[0], {"video": frames}], "Represent the given video.")
        assert float(check[0] @ check[1]) > 0.99999, "a clip and its picked frames differ"
        model = embedder.model
        video_tokens = model.prepare_one(clips[0]).length
        image_tokens = model.prepare_one(images[0]).length
        timed_rate(embedder, images[:2], args.batch_size, 1)  # warm-up (allocations, first calls)
        image_rate, _ = timed_rate(embedder, images, args.batch_size, args.repeats)
        video_rate, _ = timed_rate(embedder, clips, args.batch_size, args.repeats)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    figures = {"preset": args.preset, "arch": args.arch, "items": args.items, "frames": args.frames,
               "source_frames": args.source_frames, "frame_size": args.frame_size, "max_pixels": args.max_pixels,
               "video_max_pixels": args.video_max_pixels or args.max_pixels, "batch_size": args.batch_size,
               "threads": torch.get_num_threads(), "images_per_s": image_rate, "videos_per_s": video_rate,
               "image_tokens": image_tokens, "video_tokens": video_tokens,
               "provenance": provenance()}
    print(f"## Video encode, {args.arch} {args.preset}, {args.items} items, {args.frame_size} frames, "
          f"{args.frames} of {args.source_frames} frames per clip, {torch.get_num_threads()} threads\n")
    print("| items | tokens per item | items/s |")
    print("|---|---:|---:|")
    print(f"| images | {image_tokens} | {image_rate:.2f} |")
    print(f"| clips ({args.frames} frames) | {video_tokens} | {video_rate:.2f} |")
    print(f"\nclips/s vs images/s: {video_rate / image_rate:.3f} (tokens: {video_tokens / image_tokens:.2f}x)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    main()
